// The vllm: families of GET /metrics/vllm: vLLM's names, types, help and labels (model_name,
// engine) for the numbers tandem-serve has. What vLLM exports and we do not measure (prefix-cache
// queries, prefill/decode phase times, LoRA) is left out rather than faked.
#include "request_buckets.hpp"
#include "serve_metrics.hpp"

namespace tandem::engine::serve {

std::string vllm_finished_reason(const std::string& outcome) {
  if (outcome == "length") return "length";
  if (outcome == "abort" || outcome == "error") return "abort";
  return "stop";  // stop, and tool_calls (the model stopped after a call)
}

void declare_vllm_families(api::Metrics& m, const api::Metrics::Labels& labels, int max_model_len) {
  m.declare("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  m.declare("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  m.declare("vllm:gpu_cache_usage_perc", "gauge",
            "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.");
  m.declare("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  m.declare("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.");
  m.declare("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  m.declare("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
  m.declare("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const char* reason : {"stop", "length", "abort"}) {
    auto l = labels;
    l["finished_reason"] = reason;
    m.add("vllm:request_success_total", 0, l);
  }
  m.declare("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.");
  m.declare("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.");
  m.declare("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.");
  m.declare("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted tokens per draft position.");

  m.declare_histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_count_buckets(max_model_len));
  m.declare_histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                      token_count_buckets(max_model_len));
  m.declare_histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_buckets());
  m.declare_histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                      inter_token_buckets());
  m.declare_histogram("vllm:time_per_output_token_seconds",
                      "Histogram of time per output token in seconds. DEPRECATED: Use vllm:inter_token_latency_seconds "
                      "instead.",
                      inter_token_buckets());
  m.declare_histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                      request_time_buckets());
  m.declare_histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                      request_time_buckets());
  for (const char* h : {"vllm:request_prompt_tokens", "vllm:request_generation_tokens", "vllm:time_to_first_token_seconds",
                        "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
                        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"})
    m.touch(h, labels);
}

void copy_engine_vllm(api::Metrics& m, const api::Metrics::Labels& labels, const runtime::EngineMetrics& e) {
  const double usage = e.kv_blocks_total > 0 ? static_cast<double>(e.kv_blocks_used) / e.kv_blocks_total : 0.0;
  m.set("vllm:num_requests_running", static_cast<double>(e.requests_running), labels);
  m.set("vllm:num_requests_waiting", static_cast<double>(e.requests_waiting), labels);
  m.set("vllm:gpu_cache_usage_perc", usage, labels);
  m.set("vllm:kv_cache_usage_perc", usage, labels);
  m.set("vllm:num_preemptions_total", static_cast<double>(e.preemptions), labels);
  m.set("vllm:prompt_tokens_total", static_cast<double>(e.prompt_tokens), labels);
  m.set("vllm:generation_tokens_total", static_cast<double>(e.generation_tokens), labels);
  m.set("vllm:spec_decode_num_drafts_total", static_cast<double>(e.spec_drafts), labels);
  m.set("vllm:spec_decode_num_draft_tokens_total", static_cast<double>(e.spec_draft_tokens), labels);
  m.set("vllm:spec_decode_num_accepted_tokens_total", static_cast<double>(e.spec_accepted_tokens), labels);
  for (size_t p = 0; p < e.spec_accepted_at.size(); ++p) {
    auto l = labels;
    l["position"] = std::to_string(p);
    m.set("vllm:spec_decode_num_accepted_tokens_per_pos_total", static_cast<double>(e.spec_accepted_at[p]), l);
  }
}

}  // namespace tandem::engine::serve
