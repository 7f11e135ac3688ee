#include "openai_response.hpp"

namespace tandem::engine::api {

using oj = nlohmann::ordered_json;

oj usage_json(const Usage& u) {
  oj j{{"prompt_tokens", u.prompt_tokens},
       {"completion_tokens", u.completion_tokens},
       {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.draft_tokens > 0)
    j["speculative"] = {{"draft_tokens", u.draft_tokens},
                        {"accepted_tokens", u.accepted_tokens},
                        {"acceptance_rate", static_cast<double>(u.accepted_tokens) / static_cast<double>(u.draft_tokens)}};
  return j;
}

oj chat_message_json(const ChatMessage& m) {
  oj msg;
  msg["role"] = "assistant";
  msg["content"] = m.content.empty() && !m.calls.empty() ? oj(nullptr) : oj(m.content);
  if (!m.reasoning.empty()) msg["reasoning_content"] = m.reasoning;
  if (!m.calls.empty()) {
    msg["tool_calls"] = oj::array();
    for (const auto& c : m.calls) msg["tool_calls"].push_back(tool_call_json(c));
  }
  return msg;
}

oj chat_response(const ResponseMeta& meta, const ChatMessage& m, const std::string& finish_reason, const Usage& usage) {
  return {{"id", meta.id},
          {"object", "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", oj::array({{{"index", 0}, {"message", chat_message_json(m)}, {"logprobs", nullptr},
                                  {"finish_reason", finish_reason}}})},
          {"usage", usage_json(usage)}};
}

oj chat_chunk(const ResponseMeta& meta, oj delta, const std::optional<std::string>& finish_reason) {
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", oj::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                                  {"finish_reason", finish_reason ? oj(*finish_reason) : oj(nullptr)}}})}};
}

oj chat_usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  return {{"id", meta.id},           {"object", "chat.completion.chunk"}, {"created", meta.created},
          {"model", meta.model},     {"choices", oj::array()},            {"usage", usage_json(usage)}};
}

std::vector<oj> chat_deltas(const ChatMessage& piece, int& next_tool_index) {
  std::vector<oj> out;
  if (!piece.reasoning.empty()) out.push_back({{"reasoning_content", piece.reasoning}});
  if (!piece.content.empty()) out.push_back({{"content", piece.content}});
  for (const auto& c : piece.calls) out.push_back({{"tool_calls", oj::array({tool_call_json(c, next_tool_index++)})}});
  return out;
}

oj completion_response(const ResponseMeta& meta, const std::string& text, const std::string& finish_reason,
                       const Usage& usage) {
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", oj::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}})},
          {"usage", usage_json(usage)}};
}

oj completion_chunk(const ResponseMeta& meta, const std::string& text, const std::optional<std::string>& finish_reason) {
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", oj::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr},
                                  {"finish_reason", finish_reason ? oj(*finish_reason) : oj(nullptr)}}})}};
}

oj completion_usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  return {{"id", meta.id},       {"object", "text_completion"}, {"created", meta.created},
          {"model", meta.model}, {"choices", oj::array()},      {"usage", usage_json(usage)}};
}

std::string dump(const oj& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string sse(const oj& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace tandem::engine::api
