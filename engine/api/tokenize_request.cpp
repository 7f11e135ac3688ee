#include "tokenize_request.hpp"

#include <cstdint>

namespace tandem::engine::api {

using json = nlohmann::json;

namespace {

ApiError bad(std::string param, std::string message) { return bad_request(std::move(param), std::move(message)); }

std::optional<ApiError> read_bool(const json& b, const char* key, bool& out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  if (!b[key].is_boolean()) return bad(key, std::string("'") + key + "' must be true or false");
  out = b[key].get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_model(const json& b, std::string& model) {
  if (!b.contains("model") || b["model"].is_null()) return std::nullopt;
  if (!b["model"].is_string()) return bad("model", "'model' must be a string");
  model = b["model"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Parsed<TokenizeRequest> parse_tokenize_request(const json& b) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  TokenizeRequest r;
  const bool has_prompt = b.contains("prompt"), has_messages = b.contains("messages");
  if (has_prompt == has_messages)
    return bad(has_prompt ? "messages" : "prompt", "give exactly one of 'prompt' (a string) or 'messages' (a chat)");
  if (auto e = read_model(b, r.model)) return *e;
  if (auto e = read_bool(b, "return_token_strs", r.return_token_strs)) return *e;
  if (has_prompt) {
    if (!b["prompt"].is_string()) return bad("prompt", "'prompt' must be a string");
    for (const auto& [key, value] : b.items())
      if (key != "prompt" && key != "model" && key != "add_special_tokens" && key != "return_token_strs")
        return bad(key, "unknown parameter '" + key + "' for tokenize; with 'prompt' this server accepts prompt, model, "
                        "add_special_tokens, return_token_strs");
    r.prompt = b["prompt"].get<std::string>();
    r.add_special_tokens = true;
    if (auto e = read_bool(b, "add_special_tokens", r.add_special_tokens)) return *e;
    return r;
  }
  // A chat is checked as /v1/chat/completions checks it, less the tokenize-only fields; sampling
  // fields would be accepted there and mean nothing here, so they are refused.
  json chat = json::object();
  for (const auto& [key, value] : b.items()) {
    if (key == "add_special_tokens" || key == "return_token_strs") continue;
    if (key != "messages" && key != "model" && key != "tools" && key != "chat_template_kwargs" &&
        key != "add_generation_prompt")
      return bad(key, "unknown parameter '" + key + "' for tokenize; with 'messages' this server accepts messages, "
                      "model, tools, chat_template_kwargs, add_generation_prompt, add_special_tokens, return_token_strs");
    chat[key] = value;
  }
  auto parsed = parse_chat_request(chat);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  r.chat = std::move(std::get<ChatRequest>(parsed));
  r.model = r.chat->model;
  r.add_special_tokens = false;
  if (auto e = read_bool(b, "add_special_tokens", r.add_special_tokens)) return *e;
  return r;
}

Parsed<DetokenizeRequest> parse_detokenize_request(const json& b) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  DetokenizeRequest r;
  for (const auto& [key, value] : b.items())
    if (key != "tokens" && key != "model")
      return bad(key, "unknown parameter '" + key + "' for detokenize; this server accepts tokens, model");
  if (auto e = read_model(b, r.model)) return *e;
  if (!b.contains("tokens") || !b["tokens"].is_array()) return bad("tokens", "'tokens' must be a list of token ids");
  const json& t = b["tokens"];
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!t[i].is_number_integer())
      return bad("tokens", "'tokens[" + std::to_string(i) + "]' is " + t[i].dump() + "; expected an integer token id");
    // An id past int64 is out of any vocabulary; keep it out of range rather than wrap it.
    if (t[i].is_number_unsigned() && t[i].get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      r.tokens.push_back(INT64_MAX);
    else
      r.tokens.push_back(t[i].get<std::int64_t>());
  }
  return r;
}

}  // namespace tandem::engine::api
