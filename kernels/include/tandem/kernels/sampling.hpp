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

namespace tandem::kernels {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // keep the k most likely tokens; 0 or -1: off
  float top_p = 1.0f;        // keep the smallest set whose probability reaches top_p; 1: off
  float min_p = 0.0f;        // drop tokens below min_p * (probability of the most likely); 0: off
};

struct Sampled {
  std::int32_t token = -1;
  float logprob = 0.0f;
};

// Which params are usable; a message naming the bad one, or nullptr when all are.
const char* check_sampling_params(const SamplingParams& p);

// Greedy: the first index of the largest logit.
Sampled argmax_cpu(std::span<const float> logits);

// Draws one token (params must pass check_sampling_params; logits must be non-empty).
Sampled sample_cpu(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace tandem::kernels
