#include "tandem/kernels/linear.hpp"

namespace tandem::kernels {

void linear_cpu(const float* x, const float* w, const float* bias, float* y, int rows, int in, int out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<long>(r) * in;
    float* yr = y + static_cast<long>(r) * out;
    for (int o = 0; o < out; ++o) {
      const float* wo = w + static_cast<long>(o) * in;
      double acc = bias ? bias[o] : 0.0;
      for (int i = 0; i < in; ++i) acc += static_cast<double>(xr[i]) * wo[i];
      yr[o] = static_cast<float>(acc);
    }
  }
}

}  // namespace tandem::kernels
