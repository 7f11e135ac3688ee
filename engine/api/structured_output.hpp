// The answer of a constrained request (engine/structured decided every token): the JSON document
// as content (response_format json_object / json_schema), or as one tool call (tool_choice named:
// the text is the arguments; tool_choice required: the text is {"name":..,"arguments":..}).
// Whole or streamed, in the shapes OpenAI and vLLM use: a streamed call comes as a first
// tool_calls delta with id, type and name, then deltas that add to function.arguments.
#pragma once
#include <nlohmann/json.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chat_output.hpp"

namespace tandem::engine::api {

enum class StructuredKind { none, json, tool_named, tool_any };

struct StructuredOutput {
  StructuredKind kind = StructuredKind::none;
  std::string tool_name;  // tool_named
};

// The whole answer; `finish_reason` is "tool_calls" when a complete call was made, else the
// engine's reason.
ChatMessage assemble_structured(std::string_view text, const StructuredOutput& out, const std::string& call_id);
std::string structured_finish_reason(std::string_view text, const StructuredOutput& out, const std::string& engine_reason);

class StructuredStream {
 public:
  StructuredStream(StructuredOutput out, std::string call_id);
  // Deltas for the text so far (a tool_any call holds back until its name is known, and keeps a
  // final '}', which may be the wrapper's closing brace).
  std::vector<nlohmann::ordered_json> feed(std::string_view text);
  std::vector<nlohmann::ordered_json> finish();
  std::string finish_reason(const std::string& engine_reason) const {
    return structured_finish_reason(text_, out_, engine_reason);
  }

 private:
  std::vector<nlohmann::ordered_json> arguments_up_to(std::size_t end);

  StructuredOutput out_;
  std::string call_id_;
  std::string text_;
  bool header_sent_ = false;
  std::size_t args_start_ = 0;  // where the arguments begin in text_
  std::size_t sent_ = 0;        // text_ bytes already sent (as content or arguments)
};

}  // namespace tandem::engine::api
