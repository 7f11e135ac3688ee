#include <algorithm>
#include <cmath>

#include "tandem/kernels/activation.hpp"

namespace tandem::kernels {

void swiglu_cpu(const float* gate, const float* up, float* y, long n) {
  for (long i = 0; i < n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void clamped_swiglu_cpu(float* gate, float* up, float* y, long n, float limit) {
  for (long i = 0; i < n; ++i) {
    gate[i] = std::min(gate[i], limit);
    up[i] = std::clamp(up[i], -limit, limit);
  }
  swiglu_cpu(gate, up, y, n);
}

void sigmoid_cpu(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x[i]))));
}

}  // namespace tandem::kernels

namespace tandem::kernels {

void silu_and_mul_cpu(const float* gate_up, float* y, int rows, int d, bool bf16) {
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + 2L * r * d;
    float* yr = y + static_cast<long>(r) * d;
    swiglu_cpu(g, g + d, yr, d);
    if (bf16)
      for (int i = 0; i < d; ++i) yr[i] = round_bf16(yr[i]);
  }
}

}  // namespace tandem::kernels
