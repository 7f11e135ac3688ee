#include "serve_metrics.hpp"

#include "request_buckets.hpp"

namespace tandem::engine::serve {

namespace {
// The per-request histograms, by their name after the prefix (the same under tandem_ and vllm:).
constexpr const char* kTtft = "time_to_first_token_seconds";
constexpr const char* kItl = "inter_token_latency_seconds";
constexpr const char* kE2e = "e2e_request_latency_seconds";
constexpr const char* kQueue = "request_queue_time_seconds";
constexpr const char* kPrompt = "request_prompt_tokens";
constexpr const char* kGeneration = "request_generation_tokens";

std::string t(const char* name) { return std::string("tandem_") + name; }
std::string v(const char* name) { return std::string("vllm:") + name; }

void declare_tandem(api::Metrics& m, int max_model_len) {
  m.declare("tandem_requests_total", "counter", "Requests ended, by outcome (stop, length, tool_calls, abort, error, rejected)");
  for (const char* o : {"stop", "length", "tool_calls", "abort", "error", "rejected"})
    m.add("tandem_requests_total", 0, {{"outcome", o}});
  m.declare("tandem_prompt_tokens_total", "counter", "Prompt tokens of accepted requests");
  m.declare("tandem_generation_tokens_total", "counter", "Generated tokens delivered");
  m.declare("tandem_requests_running", "gauge", "Requests being decoded");
  m.declare("tandem_requests_waiting", "gauge", "Requests queued for a batch slot or KV blocks");
  m.declare("tandem_kv_blocks_used", "gauge", "KV cache blocks in use");
  // A gauge: the pool's size, not a count of events (so no _total, which promtool reserves for counters).
  m.declare("tandem_kv_blocks_capacity", "gauge", "KV cache blocks in the pool");
  m.declare("tandem_kv_usage_ratio", "gauge", "Share of KV cache blocks in use");
  m.declare("tandem_preemptions_total", "counter", "Requests preempted because KV blocks ran out");
  m.declare("tandem_prefix_cache_hit_tokens_total", "counter", "Prompt tokens whose KV came from the prefix cache");
  m.declare("tandem_model_seconds_total", "counter", "Wall seconds of the steps' model work (forwards, drafting, sampling)");
  // Speculative decoding (zero without a drafter; `tandemctl bench` and the gates read these).
  m.declare("tandem_spec_decode_drafts_total", "counter", "Verifications of drafted tokens (target forwards over a drafted block)");
  m.declare("tandem_spec_decode_draft_tokens_total", "counter", "Tokens proposed by the speculative drafter");
  m.declare("tandem_spec_decode_accepted_tokens_total", "counter", "Drafted tokens the target model accepted");
  m.declare("tandem_spec_decode_mean_acceptance_length", "gauge",
            "Tokens per verification: 1 + accepted / verifications (1 when nothing was drafted)");
  m.declare("tandem_spec_decode_drafted_per_position_total", "counter", "Drafts proposed at each draft position (0 = first)");
  m.declare("tandem_spec_decode_accepted_per_position_total", "counter", "Drafts accepted at each draft position (0 = first)");
  // The drafter's part of tandem_model_seconds_total (on the head rank only under tensor parallelism).
  m.declare("tandem_spec_decode_draft_seconds_total", "counter", "Seconds the drafter spent proposing drafts");
  m.declare("tandem_spec_decode_verify_seconds_total", "counter",
            "Seconds of the target forwards that verified drafted blocks (with the recurrent state's rewind)");
  m.declare("tandem_spec_decode_context_seconds_total", "counter",
            "Seconds the drafter spent adding context rows for the tokens the target ran (CPU path; on a GPU this "
            "work is asynchronous and counted in the phases that wait for it)");
  m.declare_histogram(t(kTtft), "Seconds from a request's arrival to its first token", ttft_buckets());
  m.declare_histogram(t(kItl), "Seconds between a request's successive engine steps that produced tokens",
                      inter_token_buckets());
  m.declare_histogram(t(kE2e), "Seconds from a request's arrival to its end", request_time_buckets());
  m.declare_histogram(t(kQueue), "Seconds a request waited before it was first scheduled", request_time_buckets());
  m.declare_histogram(t(kPrompt), "Prompt tokens per request", token_count_buckets(max_model_len));
  m.declare_histogram(t(kGeneration), "Generated tokens per request", token_count_buckets(max_model_len));
  for (const char* h : {kTtft, kItl, kE2e, kQueue, kPrompt, kGeneration}) m.touch(t(h));
}

void copy_engine_tandem(api::Metrics& m, const runtime::EngineMetrics& e) {
  m.set("tandem_prompt_tokens_total", static_cast<double>(e.prompt_tokens));
  m.set("tandem_generation_tokens_total", static_cast<double>(e.generation_tokens));
  m.set("tandem_requests_running", static_cast<double>(e.requests_running));
  m.set("tandem_requests_waiting", static_cast<double>(e.requests_waiting));
  m.set("tandem_kv_blocks_used", e.kv_blocks_used);
  m.set("tandem_kv_blocks_capacity", e.kv_blocks_total);
  m.set("tandem_kv_usage_ratio", e.kv_blocks_total > 0 ? static_cast<double>(e.kv_blocks_used) / e.kv_blocks_total : 0.0);
  m.set("tandem_preemptions_total", static_cast<double>(e.preemptions));
  m.set("tandem_prefix_cache_hit_tokens_total", static_cast<double>(e.prefix_cache_hit_tokens));
  m.set("tandem_model_seconds_total", e.model_seconds);
  m.set("tandem_spec_decode_draft_seconds_total", e.spec_draft_seconds);
  m.set("tandem_spec_decode_verify_seconds_total", e.spec_verify_seconds);
  m.set("tandem_spec_decode_context_seconds_total", e.spec_context_seconds);
  m.set("tandem_spec_decode_drafts_total", static_cast<double>(e.spec_drafts));
  m.set("tandem_spec_decode_draft_tokens_total", static_cast<double>(e.spec_draft_tokens));
  m.set("tandem_spec_decode_accepted_tokens_total", static_cast<double>(e.spec_accepted_tokens));
  m.set("tandem_spec_decode_mean_acceptance_length",
        e.spec_drafts > 0 ? 1.0 + static_cast<double>(e.spec_accepted_tokens) / static_cast<double>(e.spec_drafts) : 1.0);
  for (size_t p = 0; p < e.spec_drafted_at.size(); ++p) {
    const api::Metrics::Labels label{{"position", std::to_string(p)}};
    m.set("tandem_spec_decode_drafted_per_position_total", static_cast<double>(e.spec_drafted_at[p]), label);
    m.set("tandem_spec_decode_accepted_per_position_total", static_cast<double>(e.spec_accepted_at[p]), label);
  }
}
}  // namespace

ServeMetrics::ServeMetrics(std::string model_name, int max_model_len)
    : vllm_labels_{{"model_name", std::move(model_name)}, {"engine", "0"}} {
  declare_tandem(tandem_, max_model_len);
  declare_vllm_families(vllm_, vllm_labels_, max_model_len);
}

void ServeMetrics::request_rejected() { tandem_.add("tandem_requests_total", 1, {{"outcome", "rejected"}}); }

void ServeMetrics::first_token(double seconds) {
  tandem_.observe(t(kTtft), seconds);
  vllm_.observe(v(kTtft), seconds, vllm_labels_);
}

void ServeMetrics::inter_token(double seconds) {
  tandem_.observe(t(kItl), seconds);
  vllm_.observe(v(kItl), seconds, vllm_labels_);
  // vLLM's name for the same observations before it was renamed; older dashboards read it.
  vllm_.observe("vllm:time_per_output_token_seconds", seconds, vllm_labels_);
}

void ServeMetrics::request_finished(const FinishedRequest& r) {
  tandem_.add("tandem_requests_total", 1, {{"outcome", r.outcome}});
  auto success = vllm_labels_;
  success["finished_reason"] = vllm_finished_reason(r.outcome);
  vllm_.add("vllm:request_success_total", 1, success);
  const auto both = [&](const char* name, double value) {
    tandem_.observe(t(name), value);
    vllm_.observe(v(name), value, vllm_labels_);
  };
  both(kE2e, r.e2e_seconds);
  if (r.queue_seconds) both(kQueue, *r.queue_seconds);
  both(kPrompt, r.prompt_tokens);
  both(kGeneration, r.generation_tokens);
}

std::string ServeMetrics::render(const runtime::EngineMetrics& e) {
  copy_engine_tandem(tandem_, e);
  return tandem_.render();
}

std::string ServeMetrics::render_vllm(const runtime::EngineMetrics& e) {
  copy_engine_vllm(vllm_, vllm_labels_, e);
  return vllm_.render();
}

}  // namespace tandem::engine::serve
