// Causal scaled dot-product attention of one sequence against its cached keys and values.
//   out[t][h] = sum_j softmax_j(scale * q[t][h] . k[j][g(h)]) v[j][g(h)],  over keys j with
//   key_pos[j] <= q_pos[t];  g(h) = h / (q_heads / kv_heads)  (grouped-query sharing)
// Strides are in floats and let q, k and v live inside wider rows (fused projections, caches).
#pragma once

namespace tandem::kernels {

struct AttentionShape {
  int q_heads = 0, kv_heads = 0;
  int qk_dim = 0, v_dim = 0;          // per head
  long q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;  // between rows (tokens)
  long q_head_stride = 0, k_head_stride = 0, v_head_stride = 0;   // between heads in a row
};

// CPU reference (fp64 softmax and sums). Rows whose query sees no key get zeros.
void attention_cpu(const float* q, const int* q_pos, int n_q, const float* k, const float* v,
                   const int* key_pos, int n_kv, float* out, const AttentionShape& s, float scale);

}  // namespace tandem::kernels
