// --tool-call-parser glm47 (and GLM-4.5's older layout, which adds newlines):
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
// A value stays a string when the tool's JSON schema says the argument is a string; otherwise
// it is parsed as JSON when it parses, and kept as a string when it does not.
#pragma once
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::engine::parse {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
};

struct ToolParse {
  std::string content;  // text outside tool-call blocks
  std::vector<ToolCall> calls;
};

class ToolCallParserGlm47 {
 public:
  // `tools` is the request's OpenAI tools array (for argument types); `make_id` names each call.
  ToolCallParserGlm47(nlohmann::json tools, std::function<std::string()> make_id);

  ToolParse parse(std::string_view output) const;  // whole output at once

  // Streaming: content streams as it comes; each call is emitted once its block closes.
  ToolParse feed(std::string_view delta);
  ToolParse finish();  // an unclosed block at the end comes back as content

 private:
  std::optional<ToolCall> parse_block(std::string_view body) const;
  nlohmann::json typed_value(const std::string& tool, const std::string& key, const std::string& raw) const;

  nlohmann::json tools_;
  std::function<std::string()> make_id_;
  bool in_block_ = false;
  std::string pending_;
};

}  // namespace tandem::engine::parse
