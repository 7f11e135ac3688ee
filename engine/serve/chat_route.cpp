// POST /v1/chat/completions: check the body, render the chat template with the messages, tools and
// kwargs (the server's --default-chat-template-kwargs under the request's chat_template_kwargs),
// tokenize, and hand the prompt to a Generation.
#include <chrono>

#include "generation.hpp"
#include "request_body.hpp"
#include "service.hpp"

namespace tandem::engine::serve {

namespace {
api::ApiError bad(std::string param, std::string message) { return api::bad_request(std::move(param), std::move(message)); }
}  // namespace

void OpenAiService::chat(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res) {
  api::ApiError err;
  auto body = parse_body(req.body, err);
  if (!body) return reject(res, err);
  auto parsed = api::parse_chat_request(*body);
  if (auto* e = std::get_if<api::ApiError>(&parsed)) return reject(res, *e);
  auto& r = std::get<api::ChatRequest>(parsed);
  if (auto e = check_model(r.model)) return reject(res, *e);
  if (!template_)
    return reject(res, bad("messages", named_settings("this model has no chat template; start tandem-serve with "
                                                      "`chat_template` FILE, or use /v1/completions")));
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  // Every tool's parameters schema is checked whatever tool_choice says: a schema the grammar
  // compiler refuses would otherwise pass under "auto" and fail only when the model calls it.
  if (auto e = check_tool_schemas(r)) return reject(res, *e);
  if (has_tools && r.tool_choice == "auto" && !options_.tool_parser)
    return reject(res, bad("tool_choice", named_settings("\"auto\" tool choice requires `enable_auto_tool_choice` and "
                                                         "`tool_call_parser` to be set on the server")));

  tmpl::ChatRequest t;
  t.messages = r.messages;
  t.tools = has_tools ? r.tools : nlohmann::ordered_json(nullptr);
  t.add_generation_prompt = r.add_generation_prompt;
  t.kwargs = options_.default_template_kwargs;
  for (const auto& [k, v] : r.chat_template_kwargs.items()) t.kwargs[k] = v;
  auto rendered = template_->apply(t);
  if (!rendered) return reject(res, bad("messages", "the chat template failed: " + rendered.error().text()));

  runtime::GenerateRequest g;
  if (auto e = fill_request(g, tokenizer_.encode(rendered.value(), /*add_special_tokens=*/false), r.sampling, "messages"))
    return reject(res, *e);
  // tool_choice required / named and JSON response formats: constrained decoding.
  api::StructuredOutput structured;
  if (auto e = constrain(r, g, structured)) return reject(res, *e);

  GenerationSpec spec;
  spec.chat = true;
  spec.stream = r.sampling.stream;
  spec.include_usage = r.sampling.include_usage;
  spec.meta = {make_id("chatcmpl-"), std::chrono::duration_cast<std::chrono::seconds>(
                                         std::chrono::system_clock::now().time_since_epoch()).count(),
               options_.model_name};
  spec.prompt_tokens = static_cast<int>(g.prompt.size());
  spec.stop = r.sampling.stop;
  spec.structured = structured;
  // A constrained answer is the document itself: no reasoning or glm47 tool-call markup in it.
  const bool free_text = structured.kind == api::StructuredKind::none;
  spec.output.reasoning = free_text && options_.reasoning_parser;
  spec.output.tool_calls = free_text && options_.tool_parser && has_tools && r.tool_choice != "none";
  if (has_tools) spec.output.tools = nlohmann::json::parse(r.tools.dump());
  spec.metrics = metrics_;
  if (auto why = Generation::start(engine_, tokenizer_, std::move(g), std::move(spec), res))
    return reject(res, bad("messages", *why));
}

}  // namespace tandem::engine::serve
