#include <cmath>

#include "tandem/kernels/rmsnorm.hpp"

namespace tandem::kernels {

void rmsnorm_cpu(const float* x, const float* w, float* y, int rows, int n, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<long>(r) * n;
    float* yr = y + static_cast<long>(r) * n;
    double sum_sq = 0;
    for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(sum_sq / n + eps);
    for (int i = 0; i < n; ++i) yr[i] = static_cast<float>(xr[i] * inv * w[i]);
  }
}

}  // namespace tandem::kernels

namespace tandem::kernels {

void rmsnorm_residual_cpu(float* x, const float* residual, const float* w, float* y, int rows, int n, float eps,
                          bool bf16) {
  for (int r = 0; r < rows; ++r) {
    float* xr = x + static_cast<long>(r) * n;
    const float* rr = residual + static_cast<long>(r) * n;
    float* yr = y + static_cast<long>(r) * n;
    double sum_sq = 0;
    for (int i = 0; i < n; ++i) {
      xr[i] += rr[i];  // an fp32 add, as on the GPU
      if (bf16) xr[i] = round_bf16(xr[i]);
      sum_sq += static_cast<double>(xr[i]) * xr[i];
    }
    const double inv = 1.0 / std::sqrt(sum_sq / n + eps);
    for (int i = 0; i < n; ++i) {
      yr[i] = static_cast<float>(xr[i] * inv * w[i]);
      if (bf16) yr[i] = round_bf16(yr[i]);
    }
  }
}

}  // namespace tandem::kernels
