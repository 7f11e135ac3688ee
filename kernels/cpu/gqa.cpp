// CPU reference of grouped-query attention's per-head RMSNorm (gqa.hpp, cuda/gqa.cu).
#include <cmath>

#include "tandem/kernels/gqa.hpp"

namespace tandem::kernels {

void head_rmsnorm_cpu(float* x, long ld, int tokens, int q_heads, int k_heads, int head_dim, const float* q_w,
                      const float* k_w, float eps) {
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < q_heads + k_heads; ++h) {
      float* row = x + t * ld + static_cast<long>(h) * head_dim;
      const float* w = h < q_heads ? q_w : k_w;
      double s = 0;
      for (int i = 0; i < head_dim; ++i) s += static_cast<double>(row[i]) * row[i];
      const double scale = 1.0 / std::sqrt(s / head_dim + eps);
      for (int i = 0; i < head_dim; ++i) row[i] = round_bf16(static_cast<float>(row[i] * scale * w[i]));
    }
}

}  // namespace tandem::kernels
