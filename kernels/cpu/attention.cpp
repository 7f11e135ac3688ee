#include <cmath>
#include <limits>
#include <vector>

#include "tandem/kernels/attention.hpp"

namespace tandem::kernels {

namespace {

// One body for contiguous and paged keys: `key(j)` / `value(j)` give the start of row j's K / V.
template <class KeyRow, class ValueRow>
void attend(const float* q, const int* q_pos, int n_q, KeyRow key, ValueRow value, const int* key_pos, int n_kv,
            float* out, const AttentionShape& s, float scale) {
  const int group = s.q_heads / s.kv_heads;
  std::vector<double> score(static_cast<size_t>(n_kv)), acc(static_cast<size_t>(s.v_dim));
  for (int t = 0; t < n_q; ++t) {
    for (int h = 0; h < s.q_heads; ++h) {
      const float* qh = q + t * s.q_stride + h * s.q_head_stride;
      const int g = h / group;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < n_kv; ++j) {
        if (key_pos[j] > q_pos[t]) continue;
        const float* kj = key(j) + g * s.k_head_stride;
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
        const float* vj = value(j) + g * s.v_head_stride;
        for (int d = 0; d < s.v_dim; ++d) acc[static_cast<size_t>(d)] += p * vj[d];
      }
      float* oh = out + t * s.out_stride + static_cast<long>(h) * s.v_dim;
      for (int d = 0; d < s.v_dim; ++d)
        oh[d] = denom > 0 ? static_cast<float>(acc[static_cast<size_t>(d)] / denom) : 0.f;
    }
  }
}

}  // namespace

void attention_cpu(const float* q, const int* q_pos, int n_q, const float* k, const float* v,
                   const int* key_pos, int n_kv, float* out, const AttentionShape& s, float scale) {
  attend(
      q, q_pos, n_q, [&](int j) { return k + j * s.k_stride; }, [&](int j) { return v + j * s.v_stride; }, key_pos,
      n_kv, out, s, scale);
}

void attention_paged_cpu(const float* q, const int* q_pos, int n_q, const PagedRows& rows, long k_offset,
                         long v_offset, const int* key_pos, int n_kv, float* out, const AttentionShape& s, float scale) {
  attend(
      q, q_pos, n_q, [&](int j) { return rows.row(j) + k_offset; }, [&](int j) { return rows.row(j) + v_offset; },
      key_pos, n_kv, out, s, scale);
}

}  // namespace tandem::kernels
