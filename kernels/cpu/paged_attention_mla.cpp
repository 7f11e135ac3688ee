// The MLA decode kernel's shape rule and its CPU reference (paged_attention.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/kernels/paged_attention.hpp"

namespace tandem::kernels {

bool paged_attention_mla_fits(DType act, int n_tokens, int q_heads, const PagedKvLayout& l) {
  return act == DType::bf16 && l.v_in_k && l.kv_heads == 1 && l.block_size > 0 && l.k_scale > 0.f && n_tokens >= 1 && n_tokens <= kMlaDecodeMaxTokens &&
         q_heads >= 1 && q_heads <= 64 && l.qk_dim % 8 == 0 && l.qk_dim <= 576 && l.v_dim % 8 == 0 && l.v_dim <= 512 &&
         l.v_dim <= l.qk_dim && (l.dtype == DType::bf16 || l.dtype == DType::fp8_e4m3);
}

void paged_attention_mla_cpu(const float* q, int n_tokens, const std::int32_t* token_seq, const std::int32_t* token_pos,
                             int q_heads, const PagedKvLayout& l, const std::uint8_t* cache,
                             const std::int32_t* block_tables, int max_blocks_per_seq, float scale, float* out) {
  const size_t qk = static_cast<size_t>(l.qk_dim), vd = static_cast<size_t>(l.v_dim);
  const long row_bytes = static_cast<long>(l.qk_dim) * dtype_bytes(l.dtype);
  std::vector<float> keys;  // the token's context, dequantised: [n, qk_dim]
  std::vector<double> score, acc(vd);
  for (int t = 0; t < n_tokens; ++t) {
    const std::int32_t* table = block_tables + static_cast<long>(token_seq[t]) * max_blocks_per_seq;
    const size_t n = static_cast<size_t>(token_pos[t]) + 1;
    keys.resize(n * qk);
    for (size_t j = 0; j < n; ++j) {
      const long jj = static_cast<long>(j);
      const long slot = static_cast<long>(table[jj / l.block_size]) * l.block_size + jj % l.block_size;
      const std::uint8_t* row = cache + slot * row_bytes;
      for (size_t d = 0; d < qk; ++d)
        keys[j * qk + d] = load_element(l.dtype, row, static_cast<long>(d), l.k_scale);
    }
    score.resize(n);
    for (int h = 0; h < q_heads; ++h) {
      const float* qh = q + (static_cast<long>(t) * q_heads + h) * l.qk_dim;
      double big = -INFINITY, denom = 0;
      for (size_t j = 0; j < n; ++j) {
        double s = 0;
        for (size_t d = 0; d < qk; ++d) s += static_cast<double>(qh[d]) * keys[j * qk + d];
        score[j] = s * scale;
        big = std::fmax(big, score[j]);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < n; ++j) {
        const double p = std::exp(score[j] - big);
        denom += p;
        for (size_t d = 0; d < vd; ++d) acc[d] += p * keys[j * qk + d];
      }
      float* o = out + (static_cast<long>(t) * q_heads + h) * l.v_dim;
      for (size_t d = 0; d < vd; ++d) o[d] = static_cast<float>(acc[d] / denom);
    }
  }
}

}  // namespace tandem::kernels
