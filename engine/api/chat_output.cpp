#include "chat_output.hpp"

namespace tandem::engine::api {

ChatMessage assemble_chat(std::string_view text, const OutputOptions& options, const std::function<std::string()>& make_id) {
  ChatMessage m;
  std::string content(text);
  if (options.reasoning) {
    auto split = parse::split_reasoning_glm45(text);
    m.reasoning = std::move(split.reasoning);
    content = std::move(split.content);
  }
  if (options.tool_calls) {
    auto parsed = parse::ToolCallParserGlm47(options.tools, make_id).parse(content);
    m.calls = std::move(parsed.calls);
    content = std::move(parsed.content);
  }
  m.content = std::move(content);
  return m;
}

ChatStream::ChatStream(OutputOptions options, std::function<std::string()> make_id) : options_(std::move(options)) {
  if (options_.reasoning) reasoning_.emplace();
  if (options_.tool_calls) tools_.emplace(options_.tools, std::move(make_id));
}

void ChatStream::route_content(const std::string& text, ChatMessage& out, bool last) {
  if (!tools_) {
    out.content += text;
    return;
  }
  auto p = tools_->feed(text);
  out.content += p.content;
  for (auto& c : p.calls) out.calls.push_back(std::move(c));
  if (last) {
    auto rest = tools_->finish();
    out.content += rest.content;
    for (auto& c : rest.calls) out.calls.push_back(std::move(c));
  }
  if (!out.calls.empty()) saw_calls_ = true;
}

ChatMessage ChatStream::feed(std::string_view text) {
  ChatMessage out;
  if (reasoning_) {
    auto s = reasoning_->feed(text);
    out.reasoning = std::move(s.reasoning);
    route_content(s.content, out, false);
  } else {
    route_content(std::string(text), out, false);
  }
  return out;
}

ChatMessage ChatStream::finish() {
  ChatMessage out;
  std::string content;
  if (reasoning_) {
    auto s = reasoning_->finish();
    out.reasoning = std::move(s.reasoning);
    content = std::move(s.content);
  }
  route_content(content, out, true);
  return out;
}

std::string chat_finish_reason(const std::string& engine_reason, bool called_tools) {
  return called_tools ? "tool_calls" : engine_reason;
}

nlohmann::ordered_json tool_call_json(const parse::ToolCall& call, std::optional<int> index) {
  nlohmann::ordered_json j;
  if (index) j["index"] = *index;
  j["id"] = call.id;
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

}  // namespace tandem::engine::api
