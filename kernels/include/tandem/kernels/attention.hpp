// Causal scaled dot-product attention of one sequence against its cached keys and values.
//   out[t][h] = sum_j softmax_j(scale * q[t][h] . k[j][g(h)]) v[j][g(h)],  over keys j with
//   key_pos[j] <= q_pos[t];  g(h) = h / (q_heads / kv_heads)  (grouped-query sharing)
// Strides are in floats and let q, k and v live inside wider rows (fused projections, caches).
#pragma once
#include <cstdint>

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

// Cached rows that live in a paged pool: [num_blocks, block_size, row_stride] floats. Row j of
// the sequence is at slot block_table[j / block_size] * block_size + j % block_size.
struct PagedRows {
  const float* pool = nullptr;
  const std::int32_t* block_table = nullptr;
  int block_size = 0;
  long row_stride = 0;  // floats per slot
  const float* row(int j) const {
    const long slot = static_cast<long>(block_table[j / block_size]) * block_size + j % block_size;
    return pool + slot * row_stride;
  }
};

// attention_cpu with keys and values read through a block table: key j's head g starts at
// rows.row(j) + k_offset + g * k_head_stride (values likewise); k_stride and v_stride of `s` are
// not used. Same fp64 arithmetic in the same order, so it gives attention_cpu's results bit for bit.
void attention_paged_cpu(const float* q, const int* q_pos, int n_q, const PagedRows& rows, long k_offset,
                         long v_offset, const int* key_pos, int n_kv, float* out, const AttentionShape& s, float scale);

}  // namespace tandem::kernels
