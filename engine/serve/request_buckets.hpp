// Histogram bucket bounds for the per-request families. They are vLLM's (vllm/v1/metrics), so
// recording rules and dashboards written against vLLM's histograms read ours unchanged: the
// same `le` values, under both the tandem_ and the vllm: names.
#pragma once
#include <vector>

namespace tandem::engine::serve {

std::vector<double> ttft_buckets();           // time to first token, seconds
std::vector<double> inter_token_buckets();    // inter-token latency (and vLLM's older TPOT), seconds
std::vector<double> request_time_buckets();   // end-to-end latency and queue time, seconds
// Token counts per request: 1, 2, 5, 10, 20, 50, ... up to `max_model_len`.
std::vector<double> token_count_buckets(int max_model_len);

}  // namespace tandem::engine::serve
