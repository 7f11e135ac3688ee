// OpenAI response bodies: chat completions and completions, whole or as Server-Sent Events chunks
// ("data: {json}\n\n", then "data: [DONE]\n\n"), in the shapes the official clients read.
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat_output.hpp"

namespace tandem::engine::api {

struct ResponseMeta {
  std::string id;            // chatcmpl-... or cmpl-...
  std::int64_t created = 0;  // unix seconds
  std::string model;
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  // Speculative decoding, when the request drafted: draft tokens proposed and accepted
  // (usage.speculative in the JSON; not an OpenAI field, so clients that do not know it skip it).
  std::int64_t draft_tokens = 0, accepted_tokens = 0;
};

nlohmann::ordered_json usage_json(const Usage& u);

// choices[0].message: role, content (null when the model only called tools), reasoning_content
// when there was reasoning, tool_calls when there were calls.
nlohmann::ordered_json chat_message_json(const ChatMessage& m);
nlohmann::ordered_json chat_response(const ResponseMeta& meta, const ChatMessage& m, const std::string& finish_reason,
                                     const Usage& usage);

// One chat.completion.chunk with a single choice.
nlohmann::ordered_json chat_chunk(const ResponseMeta& meta, nlohmann::ordered_json delta,
                                  const std::optional<std::string>& finish_reason = std::nullopt);
// The usage chunk of stream_options.include_usage: no choices.
nlohmann::ordered_json chat_usage_chunk(const ResponseMeta& meta, const Usage& usage);
// The deltas for one streamed piece: reasoning, then content, then each tool call (numbered from
// next_tool_index, which advances). Empty pieces give nothing.
std::vector<nlohmann::ordered_json> chat_deltas(const ChatMessage& piece, int& next_tool_index);

nlohmann::ordered_json completion_response(const ResponseMeta& meta, const std::string& text,
                                           const std::string& finish_reason, const Usage& usage);
nlohmann::ordered_json completion_chunk(const ResponseMeta& meta, const std::string& text,
                                        const std::optional<std::string>& finish_reason = std::nullopt);
nlohmann::ordered_json completion_usage_chunk(const ResponseMeta& meta, const Usage& usage);

// JSON text for the wire; invalid UTF-8 (never expected) becomes U+FFFD rather than an exception.
std::string dump(const nlohmann::ordered_json& j);
std::string sse(const nlohmann::ordered_json& j);
inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace tandem::engine::api
