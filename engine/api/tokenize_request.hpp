// The bodies of POST /tokenize and /detokenize, shaped as vLLM has them:
//   /tokenize   {"prompt": "..."} (add_special_tokens defaults to true), or a chat
//               {"messages": [...], "add_generation_prompt", "chat_template_kwargs", "tools"}
//               (add_special_tokens defaults to false: the template writes them), either with an
//               optional "model" and "return_token_strs"; answered {"count", "max_model_len",
//               "tokens", "token_strs"}.
//   /detokenize {"tokens": [ids]} -> {"prompt": "..."}.
// Fields are checked by type; token ids against the vocabulary by the route, which knows it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "openai_request.hpp"

namespace tandem::engine::api {

struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;  // a completion-style request
  std::optional<ChatRequest> chat;    // or a chat (messages, tools, template kwargs)
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<std::int64_t> tokens;  // as sent; the route checks them against the vocabulary
};

Parsed<TokenizeRequest> parse_tokenize_request(const nlohmann::json& body);
Parsed<DetokenizeRequest> parse_detokenize_request(const nlohmann::json& body);

}  // namespace tandem::engine::api
