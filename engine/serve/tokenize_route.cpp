// POST /tokenize and /detokenize, as vLLM has them: the same tokenizer and chat template the
// generation routes use, so a client can count a prompt's tokens exactly before sending it.
#include "openai_response.hpp"
#include "request_body.hpp"
#include "service.hpp"
#include "tokenize_request.hpp"

namespace tandem::engine::serve {

using oj = nlohmann::ordered_json;

namespace {
void send_error(const std::shared_ptr<api::Responder>& res, const api::ApiError& e) {
  res->send(e.status, "application/json", e.body());
}

api::ApiError bad(std::string param, std::string message) { return api::bad_request(std::move(param), std::move(message)); }
}  // namespace

void OpenAiService::tokenize(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res) {
  api::ApiError err;
  auto body = parse_body(req.body, err);
  if (!body) return send_error(res, err);
  auto parsed = api::parse_tokenize_request(*body);
  if (auto* e = std::get_if<api::ApiError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<api::TokenizeRequest>(parsed);
  if (auto e = check_model(r.model)) return send_error(res, *e);

  std::string text;
  if (r.prompt) {
    text = *r.prompt;
  } else {
    if (!template_)
      return send_error(res, bad("messages", named_settings("this model has no chat template; start tandem-serve with "
                                                            "`chat_template` FILE, or tokenize a 'prompt'")));
    tmpl::ChatRequest t;
    t.messages = r.chat->messages;
    t.tools = r.chat->tools.is_array() && !r.chat->tools.empty() ? r.chat->tools : oj(nullptr);
    t.add_generation_prompt = r.chat->add_generation_prompt;
    t.kwargs = options_.default_template_kwargs;
    for (const auto& [k, v] : r.chat->chat_template_kwargs.items()) t.kwargs[k] = v;
    auto rendered = template_->apply(t);
    if (!rendered) return send_error(res, bad("messages", "the chat template failed: " + rendered.error().text()));
    text = rendered.value();
  }
  const std::vector<std::int32_t> ids = tokenizer_.encode(text, r.add_special_tokens);
  oj out{{"count", ids.size()}, {"max_model_len", engine_.max_model_len()}, {"tokens", ids}, {"token_strs", nullptr}};
  if (r.return_token_strs) {
    oj strs = oj::array();
    for (std::int32_t id : ids) strs.push_back(tokenizer_.id_to_token(id).value_or(""));
    out["token_strs"] = std::move(strs);
  }
  res->send(200, "application/json", api::dump(out));
}

void OpenAiService::detokenize(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res) {
  api::ApiError err;
  auto body = parse_body(req.body, err);
  if (!body) return send_error(res, err);
  auto parsed = api::parse_detokenize_request(*body);
  if (auto* e = std::get_if<api::ApiError>(&parsed)) return send_error(res, *e);
  auto& r = std::get<api::DetokenizeRequest>(parsed);
  if (auto e = check_model(r.model)) return send_error(res, *e);
  const auto vocab = static_cast<std::int64_t>(tokenizer_.vocab_size());
  std::vector<std::int32_t> ids;
  ids.reserve(r.tokens.size());
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    const std::int64_t id = r.tokens[i];
    if (id < 0 || id >= vocab)
      return send_error(res, bad("tokens", "token id " + std::to_string(id) + " at index " + std::to_string(i) +
                                               " is outside the vocabulary [0, " + std::to_string(vocab) + ")"));
    ids.push_back(static_cast<std::int32_t>(id));
  }
  // Special tokens are kept, as vLLM's detokenize keeps them: the text is what the ids say.
  res->send(200, "application/json", api::dump(oj{{"prompt", tokenizer_.decode(ids, /*skip_special_tokens=*/false)}}));
}

}  // namespace tandem::engine::serve
