// The OpenAI routes of tandem-serve over one Engine: /health, /v1/models, /metrics (and
// /metrics/vllm), /version, /tokenize, /detokenize, /v1/chat/completions and /v1/completions. A handler checks and prepares the request on the HTTP
// thread, then hands it to a Generation (generation.hpp) that answers from the engine's events,
// so no HTTP thread waits for tokens.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine.hpp"
#include "http_server.hpp"
#include "openai_request.hpp"
#include "serve_metrics.hpp"
#include "startup_phases.hpp"
#include "structured_output.hpp"
#include "token_vocabulary.hpp"
#include "tandem/template/chat_template.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace tandem::engine::serve {

struct ServiceOptions {
  std::string model_name;        // what /v1/models lists and requests may name
  bool reasoning_parser = false;  // --reasoning-parser glm45
  bool tool_parser = false;       // --tool-call-parser glm47 with --enable-auto-tool-choice
  nlohmann::ordered_json default_template_kwargs = nlohmann::ordered_json::object();
  // Reported by /health as "startup" (null: /health says only that it serves).
  std::shared_ptr<const StartupPhases> startup;
  // Replies that tell the client which server setting would change the answer name it by field
  // in backquotes (`chat_template`); the command line maps the field to its flag. Empty: fields.
  std::function<std::string(std::string_view)> name_settings;
};

class OpenAiService {
 public:
  // All three must outlive the service; `chat_template` may be null (chat requests then get 400).
  OpenAiService(runtime::Engine& engine, const tokenizer::Tokenizer& tokenizer, const tmpl::ChatTemplate* chat_template,
                ServiceOptions options);

  void handle(const api::HttpRequest& req, std::shared_ptr<api::Responder> res);
  // /health answers 503 once shutdown starts, so a balancer stops sending work.
  void set_serving(bool serving) { serving_ = serving; }

 private:
  void chat(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res);
  void completion(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res);
  void models(const std::shared_ptr<api::Responder>& res);
  // POST /tokenize and /detokenize (tokenize_route.cpp); their 400s are not counted as rejected
  // generation requests.
  void tokenize(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res);
  void detokenize(const api::HttpRequest& req, const std::shared_ptr<api::Responder>& res);
  void reject(const std::shared_ptr<api::Responder>& res, const api::ApiError& e);
  std::optional<api::ApiError> check_model(const std::string& requested) const;
  // A message naming server settings (`field`), as ServiceOptions::name_settings names them.
  std::string named_settings(const std::string& message) const;
  // The engine request for a prompt, or a 400 when it cannot fit max-model-len.
  std::optional<api::ApiError> fill_request(runtime::GenerateRequest& g, std::vector<std::int32_t> prompt,
                                            const api::Sampling& s, const char* prompt_field) const;
  // Each tool's parameters schema through the grammar compiler; the first it refuses, by name.
  std::optional<api::ApiError> check_tool_schemas(const api::ChatRequest& r) const;
  // tool_choice required / named and response_format json_object / json_schema: the constraint
  // on g (engine/structured) and how to shape the answer, or a 400 (a schema we cannot enforce,
  // an unknown tool, max_tokens too small for any valid answer). structured_request.cpp.
  std::optional<api::ApiError> constrain(const api::ChatRequest& r, runtime::GenerateRequest& g,
                                         api::StructuredOutput& out);
  // The tokenizer's byte trie, built on the first constrained request (a 151k vocabulary: ~0.3 s).
  tandem::Result<std::shared_ptr<const structured::TokenVocabulary>> vocabulary();

  runtime::Engine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  const tmpl::ChatTemplate* template_;
  ServiceOptions options_;
  std::shared_ptr<ServeMetrics> metrics_;
  std::atomic<bool> serving_{true};
  std::mutex vocab_mu_;
  std::optional<tandem::Result<std::shared_ptr<const structured::TokenVocabulary>>> vocab_;
  std::int64_t created_;
};

// "prefix-" + a process-unique hex suffix, for response and tool-call ids.
std::string make_id(const std::string& prefix);
// Tool-call ids ("call_...") for the glm47 parser.
std::function<std::string()> tool_id_maker();

}  // namespace tandem::engine::serve
