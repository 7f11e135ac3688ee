// What a request asks of sampling and what comes back, shared by the CPU reference (sampling.hpp)
// and the CUDA back end (sampling_cuda.hpp, which nvcc compiles as C++17).
#pragma once
#include <cstdint>

#include "tandem/result.hpp"

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

// Which params are usable: Ok, or an Error naming the bad one.
Status check_sampling_params(const SamplingParams& p);

}  // namespace tandem::kernels
