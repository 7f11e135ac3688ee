#include "service.hpp"

#include <chrono>
#include <cstdio>
#include <random>

#include "openai_response.hpp"
#include "tandem/build_info.hpp"

namespace tandem::engine::serve {

using oj = nlohmann::ordered_json;

std::string make_id(const std::string& prefix) {
  // A random process prefix and a counter: unique within the process, unlikely to repeat across
  // restarts, and cheap (no shared random engine to lock).
  static const std::uint64_t process = std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32);
  static std::atomic<std::uint64_t> counter{0};
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08llx%08llx", static_cast<unsigned long long>(process & 0xffffffffu),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffffffffu));
  return prefix + buf;
}

std::function<std::string()> tool_id_maker() {
  return [] { return make_id("call_"); };
}

OpenAiService::OpenAiService(runtime::Engine& engine, const tokenizer::Tokenizer& tokenizer,
                             const tmpl::ChatTemplate* chat_template, ServiceOptions options)
    : engine_(engine), tokenizer_(tokenizer), template_(chat_template), options_(std::move(options)),
      metrics_(std::make_shared<ServeMetrics>(options_.model_name, engine.max_model_len())),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

void OpenAiService::reject(const std::shared_ptr<api::Responder>& res, const api::ApiError& e) {
  metrics_->request_rejected();
  res->send(e.status, "application/json", e.body());
}

std::string OpenAiService::named_settings(const std::string& message) const {
  return options_.name_settings ? options_.name_settings(message) : message;
}

std::optional<api::ApiError> OpenAiService::check_model(const std::string& requested) const {
  if (requested.empty() || requested == options_.model_name) return std::nullopt;
  api::ApiError e;
  e.status = 404;
  e.type = "NotFoundError";
  e.param = "model";
  e.message = "The model '" + requested + "' does not exist; this server serves '" + options_.model_name + "'";
  return e;
}

std::optional<api::ApiError> OpenAiService::fill_request(runtime::GenerateRequest& g, std::vector<std::int32_t> prompt,
                                                         const api::Sampling& s, const char* prompt_field) const {
  const int max_len = engine_.max_model_len();
  const int n = static_cast<int>(prompt.size());
  api::ApiError e;
  e.param = prompt_field;
  if (n == 0) {
    e.message = "the prompt is empty after tokenization";
    return e;
  }
  // As vLLM words it, so clients that parse the message keep working.
  if (n >= max_len || (s.max_tokens > 0 && n + s.max_tokens > max_len)) {
    e.message = "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, you requested " +
                std::to_string(n + std::max(s.max_tokens, 0)) + " tokens (" + std::to_string(n) + " in the " +
                prompt_field + ", " + std::to_string(std::max(s.max_tokens, 0)) +
                " in the completion). Please reduce the length of the " + prompt_field + " or completion.";
    if (n < max_len) e.param = "max_tokens";
    return e;
  }
  const int vocab = engine_.model().vocab_size();
  for (int i = 0; i < n; ++i) {
    if (prompt[static_cast<std::size_t>(i)] >= vocab) {
      e.message = "token id " + std::to_string(prompt[static_cast<std::size_t>(i)]) + " at index " + std::to_string(i) +
                  " is outside the vocabulary of " + std::to_string(vocab);
      return e;
    }
  }
  g.prompt = std::move(prompt);
  g.sampling.temperature = static_cast<float>(s.temperature);
  g.sampling.top_p = static_cast<float>(s.top_p);
  g.sampling.top_k = s.top_k < 0 ? 0 : s.top_k;
  g.sampling.min_p = static_cast<float>(s.min_p);
  g.seed = s.seed;
  g.ignore_eos = s.ignore_eos;
  g.max_tokens = s.max_tokens > 0 ? s.max_tokens : max_len - n;
  g.use_prefix_cache = s.prefix_cache;
  return std::nullopt;
}

void OpenAiService::models(const std::shared_ptr<api::Responder>& res) {
  const oj body = {{"object", "list"},
                   {"data", oj::array({{{"id", options_.model_name},
                                        {"object", "model"},
                                        {"created", created_},
                                        {"owned_by", "tandem"},
                                        {"root", options_.model_name},
                                        {"max_model_len", engine_.max_model_len()}}})}};
  res->send(200, "application/json", api::dump(body));
}

void OpenAiService::handle(const api::HttpRequest& req, std::shared_ptr<api::Responder> res) {
  struct Route {
    const char* path;
    const char* method;
  };
  static constexpr Route kRoutes[] = {{"/health", "GET"},          {"/v1/models", "GET"},
                                      {"/metrics", "GET"},         {"/metrics/vllm", "GET"},
                                      {"/version", "GET"},         {"/tokenize", "POST"},
                                      {"/detokenize", "POST"},     {"/v1/completions", "POST"},
                                      {"/v1/chat/completions", "POST"}};
  const Route* route = nullptr;
  for (const auto& r : kRoutes)
    if (req.path == r.path) route = &r;
  api::ApiError e;
  if (!route) {
    e.status = 404;
    e.type = "NotFoundError";
    e.message = "no route " + req.path +
                " (try /v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize, /version, /health, "
                "/metrics, /metrics/vllm)";
    return res->send(404, "application/json", e.body());
  }
  if (req.method != route->method && !(req.method == "HEAD" && std::string(route->method) == "GET")) {
    e.status = 405;
    e.message = req.method + " is not allowed on " + req.path + "; use " + route->method;
    return res->send(405, "application/json", e.body());
  }
  const std::string path = route->path;
  if (path == "/health") {
    if (serving_) {
      oj body{{"status", "ok"}};
      if (options_.startup) body["startup"] = options_.startup->to_json();
      return res->send(200, "application/json", api::dump(body));
    }
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "shutting down";
    return res->send(503, "application/json", e.body());
  }
  if (path == "/v1/models") return models(res);
  if (path == "/metrics") return res->send(200, "text/plain; version=0.0.4", metrics_->render(engine_.metrics()));
  if (path == "/metrics/vllm")
    return res->send(200, "text/plain; version=0.0.4", metrics_->render_vllm(engine_.metrics()));
  // As vLLM answers it ({"version": ...}), with the commit beside it.
  if (path == "/version") {
    const auto& b = tandem::build_info();
    return res->send(200, "application/json", api::dump(oj{{"version", b.version}, {"commit", b.commit}}));
  }
  // Tokenizing needs no engine capacity, so it is answered while shutting down too.
  if (path == "/tokenize") return tokenize(req, res);
  if (path == "/detokenize") return detokenize(req, res);
  if (!serving_) {
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the server is shutting down";
    return reject(res, e);
  }
  if (path == "/v1/chat/completions") return chat(req, res);
  return completion(req, res);
}

}  // namespace tandem::engine::serve
