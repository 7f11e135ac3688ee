// From generated text to an OpenAI chat message: reasoning (--reasoning-parser glm45) and tool
// calls (--tool-call-parser glm47) are taken out of the text, whole or as it streams. Stop strings
// are cut before this (StopMatcher), so both paths see the same text.
#pragma once
#include <nlohmann/json.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reasoning_glm45.hpp"
#include "tool_call_glm47.hpp"

namespace tandem::engine::api {

struct OutputOptions {
  bool reasoning = false;   // split <think>...</think> into reasoning_content
  bool tool_calls = false;  // parse glm47 tool calls (parser on, auto tool choice, tools given, choice not none)
  nlohmann::json tools = nlohmann::json::array();  // the request's tools: argument types for the parser
};

struct ChatMessage {
  std::string content;
  std::string reasoning;
  std::vector<parse::ToolCall> calls;
};

// The whole output at once (non-streaming responses).
ChatMessage assemble_chat(std::string_view text, const OutputOptions& options, const std::function<std::string()>& make_id);

// The same, piece by piece: each feed() returns what may be sent now; tool calls come out whole,
// once their block closes.
class ChatStream {
 public:
  ChatStream(OutputOptions options, std::function<std::string()> make_id);
  ChatMessage feed(std::string_view text);
  ChatMessage finish();
  bool saw_tool_calls() const { return saw_calls_; }

 private:
  void route_content(const std::string& text, ChatMessage& out, bool last);

  OutputOptions options_;
  std::optional<parse::ReasoningStreamGlm45> reasoning_;
  std::optional<parse::ToolCallParserGlm47> tools_;
  bool saw_calls_ = false;
};

// "tool_calls" when the model called a tool, else the engine's reason ("stop" or "length").
std::string chat_finish_reason(const std::string& engine_reason, bool called_tools);

// A tool call in OpenAI's message shape; `index` is added for stream deltas.
nlohmann::ordered_json tool_call_json(const parse::ToolCall& call, std::optional<int> index = std::nullopt);

}  // namespace tandem::engine::api
