#include <cmath>
#include <limits>
#include <vector>

#include "tandem/kernels/attention.hpp"

namespace tandem::kernels {

void attention_cpu(const float* q, const int* q_pos, int n_q, const float* k, const float* v,
                   const int* key_pos, int n_kv, float* out, const AttentionShape& s, float scale) {
  const int group = s.q_heads / s.kv_heads;
  std::vector<double> score(static_cast<size_t>(n_kv)), acc(static_cast<size_t>(s.v_dim));
  for (int t = 0; t < n_q; ++t) {
    for (int h = 0; h < s.q_heads; ++h) {
      const float* qh = q + t * s.q_stride + h * s.q_head_stride;
      const int g = h / group;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < n_kv; ++j) {
        if (key_pos[j] > q_pos[t]) continue;
        const float* kj = k + j * s.k_stride + g * s.k_head_stride;
        double dot = 0;
        for (int d = 0; d < s.qk_dim; ++d) dot += static_cast<double>(qh[d]) * kj[d];
        score[static_cast<size_t>(j)] = dot * scale;
        if (score[static_cast<size_t>(j)] > max_score) max_score = score[static_cast<size_t>(j)];
      }
      double denom = 0;
      for (auto& a : acc) a = 0;
      for (int j = 0; j < n_kv; ++j) {
        if (key_pos[j] > q_pos[t]) continue;
        const double p = std::exp(score[static_cast<size_t>(j)] - max_score);
        denom += p;
        const float* vj = v + j * s.v_stride + g * s.v_head_stride;
        for (int d = 0; d < s.v_dim; ++d) acc[static_cast<size_t>(d)] += p * vj[d];
      }
      float* oh = out + t * s.out_stride + static_cast<long>(h) * s.v_dim;
      for (int d = 0; d < s.v_dim; ++d)
        oh[d] = denom > 0 ? static_cast<float>(acc[static_cast<size_t>(d)] / denom) : 0.f;
    }
  }
}

}  // namespace tandem::kernels
