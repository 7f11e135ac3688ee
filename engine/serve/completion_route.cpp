// POST /v1/completions: a prompt string (tokenized with the tokenizer's special tokens, as vLLM
// does) or token ids, optional echo, streaming or not.
#include <chrono>

#include "generation.hpp"
#include "request_body.hpp"
#include "service.hpp"

namespace tandem::engine::serve {

void OpenAiService::completion(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res) {
  api::ApiError err;
  auto body = parse_body(req.body, err);
  if (!body) return reject(res, err);
  auto parsed = api::parse_completion_request(*body);
  if (auto* e = std::get_if<api::ApiError>(&parsed)) return reject(res, *e);
  auto& r = std::get<api::CompletionRequest>(parsed);
  if (auto e = check_model(r.model)) return reject(res, *e);

  std::vector<std::int32_t> ids;
  std::string prompt_text;
  if (auto* text = std::get_if<std::string>(&r.prompt)) {
    ids = tokenizer_.encode(*text, /*add_special_tokens=*/true);
    prompt_text = *text;
  } else {
    ids = std::get<std::vector<std::int32_t>>(r.prompt);
  }
  runtime::GenerateRequest g;
  if (auto e = fill_request(g, ids, r.sampling, "prompt")) return reject(res, *e);
  if (r.echo && prompt_text.empty()) prompt_text = tokenizer_.decode(g.prompt, /*skip_special_tokens=*/true);

  GenerationSpec spec;
  spec.chat = false;
  spec.stream = r.sampling.stream;
  spec.include_usage = r.sampling.include_usage;
  spec.meta = {make_id("cmpl-"), std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch()).count(),
               options_.model_name};
  spec.prompt_tokens = static_cast<int>(g.prompt.size());
  spec.stop = r.sampling.stop;
  if (r.echo) spec.echo = prompt_text;
  spec.metrics = metrics_;
  if (auto why = Generation::start(engine_, tokenizer_, std::move(g), std::move(spec), res)) {
    api::ApiError e;
    e.param = "prompt";
    e.message = *why;
    return reject(res, e);
  }
}

}  // namespace tandem::engine::serve
