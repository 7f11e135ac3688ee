// The /metrics families of tandem-serve. Request outcomes and per-request histograms (time to
// first token, inter-token latency, end-to-end latency, queue time, prompt and generation tokens)
// are recorded as requests run; engine numbers (tokens, queue, KV blocks, preemptions,
// prefix-cache hits, speculation) are copied from Engine::metrics() at each scrape, so they are
// exact rather than sampled.
//
// Two renderings of the same numbers: `render` (GET /metrics) uses tandem_ names and passes
// `promtool check metrics`; `render_vllm` (GET /metrics/vllm) uses vLLM's `vllm:` names, labels
// (model_name, engine) and buckets, so a vLLM Grafana dashboard works against it unchanged.
// They are apart because promtool refuses ':' in a metric name (it is meant for recording rules),
// which vLLM's own names fail.
#pragma once
#include <optional>
#include <string>

#include "engine.hpp"
#include "metrics.hpp"

namespace tandem::engine::serve {

// A request that reached the engine, as it ends.
struct FinishedRequest {
  std::string outcome;  // stop | length | tool_calls | abort | error
  int prompt_tokens = 0;
  int generation_tokens = 0;
  double e2e_seconds = 0;               // from its arrival to its last token (or its end)
  std::optional<double> queue_seconds;  // absent when it never got scheduled
};

class ServeMetrics {
 public:
  ServeMetrics(std::string model_name, int max_model_len);

  void request_rejected();  // a 4xx before the engine saw it: outcome "rejected"
  void first_token(double seconds);
  void inter_token(double seconds);
  void request_finished(const FinishedRequest& r);

  std::string render(const runtime::EngineMetrics& m);
  std::string render_vllm(const runtime::EngineMetrics& m);

 private:
  api::Metrics tandem_, vllm_;
  api::Metrics::Labels vllm_labels_;  // model_name and engine, on every vllm: series
};

// The vllm: families (vllm_metrics.cpp): their declaration, and the copy of the engine's numbers.
void declare_vllm_families(api::Metrics& m, const api::Metrics::Labels& labels, int max_model_len);
void copy_engine_vllm(api::Metrics& m, const api::Metrics::Labels& labels, const runtime::EngineMetrics& e);
// vLLM's finished_reason for one of our outcomes (vLLM knows stop, length and abort).
std::string vllm_finished_reason(const std::string& outcome);

}  // namespace tandem::engine::serve
