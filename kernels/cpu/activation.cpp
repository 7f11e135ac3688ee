#include <cmath>

#include "tandem/kernels/activation.hpp"

namespace tandem::kernels {

void swiglu_cpu(const float* gate, const float* up, float* y, long n) {
  for (long i = 0; i < n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void sigmoid_cpu(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) y[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x[i]))));
}

}  // namespace tandem::kernels
