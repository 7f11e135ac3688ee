// The passes of glm4_moe_lite's un-absorbed prefill (cuda_glm4_moe_lite_mha.cpp), planned on the
// host: plain C++, unit-tested on the CPU (tests/model/mha_spans_test.cpp).
#pragma once
#include <algorithm>
#include <span>
#include <vector>

namespace tandem::model::cuda {

// Keys k0 .. k1 - 1 of the step's sequence `seq`.
struct MhaSpan {
  int seq = 0, k0 = 0, k1 = 0;
};

// Each sequence's keys 0 .. contexts[s] - 1 cut into spans of `cap` rows (the last shorter), so
// every span starts at a multiple of cap (the kernel's segments start on its chunks of keys: cap
// is a multiple of kMlaMhaSegmentAlign); the spans in sequence and key order, a pass holding them
// while their rows fit cap. A sequence's spans then run in key order, as the softmax state they
// carry needs. An empty context has no span; cap must be > 0.
inline std::vector<std::vector<MhaSpan>> plan_mha_passes(std::span<const int> contexts, int cap) {
  std::vector<std::vector<MhaSpan>> passes;
  int rows = cap;  // no open pass yet
  for (int s = 0; s < static_cast<int>(contexts.size()); ++s)
    for (int k0 = 0; k0 < contexts[static_cast<std::size_t>(s)]; k0 += cap) {
      const int k1 = std::min(contexts[static_cast<std::size_t>(s)], k0 + cap);
      if (rows + (k1 - k0) > cap) passes.emplace_back(), rows = 0;
      passes.back().push_back({s, k0, k1});
      rows += k1 - k0;
    }
  return passes;
}

}  // namespace tandem::model::cuda
