// Token sampling from one row of logits, CPU reference.
//
// Order, as vLLM applies it: temperature, then top-k, then top-p, then min-p; the survivors are
// renormalised and one is drawn with the request's own generator, so the same seed and the same
// logits give the same token on every run and every machine (the uniform draw is built from the
// generator's raw 64-bit output, not from a library distribution whose algorithm may differ).
// temperature 0 is greedy (first maximum on ties, as torch.argmax) and draws nothing.
//
// The returned logprob is the token's log-probability under the raw model distribution
// (log_softmax of the unmodified logits), which is what vLLM reports by default.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tandem/kernels/sampling_types.hpp"

namespace tandem::kernels {

// SamplingParams, Sampled and check_sampling_params: sampling_types.hpp; the CUDA back end:
// sampling_cuda.hpp.

// Greedy: the first index of the largest logit.
Sampled argmax_cpu(std::span<const float> logits);

// log_softmax(logits)[token], in double: the logprob reported for a token (of the raw logits).
float raw_logprob(std::span<const float> logits, std::int32_t token);

// Draws one token (params must pass check_sampling_params; logits must be non-empty).
Sampled sample_cpu(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng);
// The same draw with its uniform in [0, 1) given (what sample_cpu takes from the generator; a
// greedy row uses none): so a device model can draw the uniforms on the host, in the request's
// order, and sample where the logits are.
Sampled sample_with_uniform(std::span<const float> logits, const SamplingParams& p, double uniform);

// The one uniform number in [0, 1) that a draw takes from the generator (top 53 bits of one output).
double sampling_uniform(std::mt19937_64& rng);

// What sample_cpu draws from (temperature > 0): the surviving tokens, most likely first, with
// their probabilities after temperature, top-k, top-p and min-p (not renormalised after top-p).
struct Candidate {
  std::int32_t token;
  double prob;
};
std::vector<Candidate> sampling_support_cpu(std::span<const float> logits, const SamplingParams& p);

}  // namespace tandem::kernels
