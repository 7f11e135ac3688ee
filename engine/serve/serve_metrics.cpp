#include "serve_metrics.hpp"

namespace tandem::engine::serve {

ServeMetrics::ServeMetrics() {
  m_.declare("tandem_requests_total", "counter", "Requests ended, by outcome (stop, length, tool_calls, abort, error, rejected)");
  for (const char* o : {"stop", "length", "tool_calls", "abort", "error", "rejected"})
    m_.add("tandem_requests_total", 0, {{"outcome", o}});
  m_.declare("tandem_prompt_tokens_total", "counter", "Prompt tokens of accepted requests");
  m_.declare("tandem_generation_tokens_total", "counter", "Generated tokens delivered");
  m_.declare("tandem_requests_running", "gauge", "Requests being decoded");
  m_.declare("tandem_requests_waiting", "gauge", "Requests queued for a batch slot or KV blocks");
  m_.declare("tandem_kv_blocks_used", "gauge", "KV cache blocks in use");
  m_.declare("tandem_kv_blocks_total", "gauge", "KV cache blocks in the pool");
  m_.declare("tandem_kv_usage_ratio", "gauge", "Share of KV cache blocks in use");
  m_.declare("tandem_preemptions_total", "counter", "Requests preempted because KV blocks ran out");
  m_.declare("tandem_prefix_cache_hit_tokens_total", "counter", "Prompt tokens whose KV came from the prefix cache");
  m_.declare("tandem_model_seconds_total", "counter", "Wall seconds of the steps' model work (forwards, drafting, sampling)");
  // Speculative decoding (zero without a drafter; `tandemctl bench` and the gates read these).
  m_.declare("tandem_spec_decode_drafts_total", "counter", "Verifications of drafted tokens (target forwards over a drafted block)");
  m_.declare("tandem_spec_decode_draft_tokens_total", "counter", "Tokens proposed by the speculative drafter");
  m_.declare("tandem_spec_decode_accepted_tokens_total", "counter", "Drafted tokens the target model accepted");
  m_.declare("tandem_spec_decode_mean_acceptance_length", "gauge",
             "Tokens per verification: 1 + accepted / verifications (1 when nothing was drafted)");
  m_.declare("tandem_spec_decode_drafted_per_position_total", "counter", "Drafts proposed at each draft position (0 = first)");
  m_.declare("tandem_spec_decode_accepted_per_position_total", "counter", "Drafts accepted at each draft position (0 = first)");
  // The drafter's part of tandem_model_seconds_total (on the head rank only under tensor parallelism).
  m_.declare("tandem_spec_decode_draft_seconds_total", "counter", "Seconds the drafter spent proposing drafts");
  m_.declare("tandem_spec_decode_context_seconds_total", "counter",
             "Seconds the drafter spent adding context rows for the tokens the target ran (CPU path; on a GPU this "
             "work is asynchronous and counted in the phases that wait for it)");
}

void ServeMetrics::request_done(const std::string& outcome) { m_.add("tandem_requests_total", 1, {{"outcome", outcome}}); }

std::string ServeMetrics::render(const runtime::EngineMetrics& e) {
  m_.set("tandem_prompt_tokens_total", static_cast<double>(e.prompt_tokens));
  m_.set("tandem_generation_tokens_total", static_cast<double>(e.generation_tokens));
  m_.set("tandem_requests_running", static_cast<double>(e.requests_running));
  m_.set("tandem_requests_waiting", static_cast<double>(e.requests_waiting));
  m_.set("tandem_kv_blocks_used", e.kv_blocks_used);
  m_.set("tandem_kv_blocks_total", e.kv_blocks_total);
  m_.set("tandem_kv_usage_ratio", e.kv_blocks_total > 0 ? static_cast<double>(e.kv_blocks_used) / e.kv_blocks_total : 0.0);
  m_.set("tandem_preemptions_total", static_cast<double>(e.preemptions));
  m_.set("tandem_prefix_cache_hit_tokens_total", static_cast<double>(e.prefix_cache_hit_tokens));
  m_.set("tandem_model_seconds_total", e.model_seconds);
  m_.set("tandem_spec_decode_draft_seconds_total", e.spec_draft_seconds);
  m_.set("tandem_spec_decode_context_seconds_total", e.spec_context_seconds);
  m_.set("tandem_spec_decode_drafts_total", static_cast<double>(e.spec_drafts));
  m_.set("tandem_spec_decode_draft_tokens_total", static_cast<double>(e.spec_draft_tokens));
  m_.set("tandem_spec_decode_accepted_tokens_total", static_cast<double>(e.spec_accepted_tokens));
  m_.set("tandem_spec_decode_mean_acceptance_length",
         e.spec_drafts > 0 ? 1.0 + static_cast<double>(e.spec_accepted_tokens) / static_cast<double>(e.spec_drafts) : 1.0);
  for (size_t p = 0; p < e.spec_drafted_at.size(); ++p) {
    const std::map<std::string, std::string> label{{"position", std::to_string(p)}};
    m_.set("tandem_spec_decode_drafted_per_position_total", static_cast<double>(e.spec_drafted_at[p]), label);
    m_.set("tandem_spec_decode_accepted_per_position_total", static_cast<double>(e.spec_accepted_at[p]), label);
  }
  return m_.render();
}

}  // namespace tandem::engine::serve
