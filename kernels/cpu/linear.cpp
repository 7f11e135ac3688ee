#include "tandem/kernels/linear.hpp"

#include <algorithm>

namespace tandem::kernels {

// Rows are taken a block at a time and each weight row is used for the whole block while it sits
// in cache, so a forward of many tokens (prefill, a speculative verification) reads the weights
// from memory once per block instead of once per token. Every output is still one dot product in
// the same order, so the results are bit for bit those of the row-by-row loop.
void linear_cpu(const float* x, const float* w, const float* bias, float* y, int rows, int in, int out) {
  constexpr int kRowBlock = 8;
  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int r1 = std::min(rows, r0 + kRowBlock);
    for (int o = 0; o < out; ++o) {
      const float* wo = w + static_cast<long>(o) * in;
      for (int r = r0; r < r1; ++r) {
        const float* xr = x + static_cast<long>(r) * in;
        double acc = bias ? bias[o] : 0.0;
        for (int i = 0; i < in; ++i) acc += static_cast<double>(xr[i]) * wo[i];
        y[static_cast<long>(r) * out + o] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace tandem::kernels
