// One request in flight: it turns the engine's token events into the HTTP answer. Tokens are
// decoded incrementally (StreamDecoder), cut at stop strings (StopMatcher; the engine request is
// cancelled there), then either streamed as SSE chunks or gathered for one JSON response. A client
// that disconnects cancels the engine request, which frees its KV blocks at once.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chat_output.hpp"
#include "engine.hpp"
#include "http_server.hpp"
#include "openai_request.hpp"
#include "openai_response.hpp"
#include "serve_metrics.hpp"
#include "stop_strings.hpp"
#include "structured_output.hpp"
#include "tandem/tokenizer/stream_decoder.hpp"

namespace tandem::engine::serve {

struct GenerationSpec {
  bool chat = true;  // false: /v1/completions
  bool stream = false;
  bool include_usage = false;
  api::ResponseMeta meta;
  int prompt_tokens = 0;
  std::vector<std::string> stop;
  api::OutputOptions output;  // chat only: reasoning and tool-call parsing
  api::StructuredOutput structured;  // chat only: a constrained answer (JSON content or one tool call)
  std::string echo;           // completions with echo: the prompt text, sent first
  std::shared_ptr<ServeMetrics> metrics;  // outcome and per-request histograms; may be null
};

class Generation : public std::enable_shared_from_this<Generation> {
 public:
  // Submits `request` (its on_event is set here) and starts the answer; an error when the engine
  // refuses it (nothing has been sent then, the caller answers 400).
  static std::optional<std::string> start(runtime::Engine& engine, const tokenizer::Tokenizer& tokenizer,
                                          runtime::GenerateRequest request, GenerationSpec spec,
                                          std::shared_ptr<api::Responder> responder);

  Generation(runtime::Engine& engine, const tokenizer::Tokenizer& tokenizer, GenerationSpec spec,
             std::shared_ptr<api::Responder> responder);

 private:
  void on_event(const runtime::TokenEvent& e);
  void on_client_gone();
  void take_text(const std::string& decoded);  // after the decoder, before stop strings
  void send_piece(const std::string& text);    // after stop strings
  void finish(const std::string& reason);      // stop | length
  void fail(const std::string& outcome, const std::string& why);
  void observe_token(const runtime::TokenEvent& e);  // TTFT or an inter-token interval
  void count(const std::string& outcome);            // the request's end, once, into the metrics
  void write_chunk(const nlohmann::ordered_json& chunk);

  runtime::Engine& engine_;
  GenerationSpec spec_;
  std::shared_ptr<api::Responder> res_;
  tokenizer::StreamDecoder decoder_;
  api::StopMatcher stop_;
  std::optional<api::ChatStream> chat_stream_;
  std::optional<api::StructuredStream> structured_stream_;
  int next_tool_index_ = 0;

  std::mutex mu_;  // events (engine thread) against start and disconnects (HTTP threads)
  runtime::RequestId id_ = 0;
  bool done_ = false;        // the answer is complete (or the client is gone)
  int completion_tokens_ = 0;
  std::int64_t draft_tokens_ = 0, accepted_tokens_ = 0;  // the request's speculation, from its events
  std::string text_;         // non-streaming: the text so far, stop strings already cut
  // For the latency histograms: when the request arrived (just before submit), when its last
  // token came and from which engine step, and its queue time as the engine measured it.
  std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_token_at_;
  std::int64_t last_step_ = -1;
  std::optional<double> queue_seconds_;
};

}  // namespace tandem::engine::serve
