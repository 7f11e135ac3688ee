// A product of a few rows (up to a few hundred) on the tensor cores, for the DFlash drafter's
// forward: y[r][o] = sum_i x[r][i] * w[o][i], bf16 operands, fp32 sums (mma.sync m16n8k16).
// Unlike gemv.hpp this is NOT batch-invariant (a row's sum is split over four warps and the tensor
// cores' adder), which the drafter may be: only the target's rows must not depend on the row count.
// What it saves over gemv at a block of 8..64 rows: one warp per 8 output rows and x row instead
// of one lane-strided fmaf chain per (output row, x row) and a butterfly per x row.
// Options, each folding a launch into the product:
//   norm:    x is rmsnorm(x32 + delta) * norm_w of rows pick[r] (or r), computed by each block into
//            shared memory; the blocks of the first column store x32 + delta into x32_out (the
//            residual after the add) unless it is null. add_rmsnorm's rounding: fp32 residual,
//            bf16 normed rows. Or the rows are embedding rows, table[ids[r]] (bf16, zero for an id
//            outside [0, vocab)), instead of x32 + delta: embed_rmsnorm's first layer.
//   silu:    y[r][o] = silu(w[o] . x[r]) * (w[o + up_offset] . x[r])   (bf16 y)
//   argmax:  keys[r] = the largest (order key of y[r][o], complement of o), folded in with
//            atomicMax (sampling_cuda.hpp's key; argmax_key_index reads it): keys start at zero,
//            which the launch's `clear` words (of an earlier launch) provide.
//   clear:   zero `clear_words` 64-bit words at `clear` (for a later launch's argmax keys).
// CPU reference: linear_cpu (and add_rmsnorm_cpu, silu_and_mul_cpu). nvcc compiles this header as
// C++17: plain types only.
#pragma once
#include <cstdint>

#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/head_prep.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

struct RowsMma {
  int rows = 0, in = 0, out = 0;
  const void* x = nullptr;  // bf16 [rows, ldx] (without norm)
  long ldx = 0;
  const void* w = nullptr;  // bf16 [out (+ up rows), ldw]
  long ldw = 0;
  void* y = nullptr;        // [rows, ldy] of y_type (may be null with argmax)
  long ldy = 0;
  DType y_type = DType::bf16;  // bf16 or f32
  bool silu = false;
  long up_offset = 0;
  // norm
  const float* x32 = nullptr;  // [.., in] fp32 residual rows
  const void* delta = nullptr;  // bf16 [.., in] added to x32 first, or null
  const void* norm_w = nullptr;  // bf16 [in]
  float eps = 0.f;
  float* x32_out = nullptr;
  const std::int32_t* pick = nullptr;
  const void* table = nullptr;  // bf16 [vocab, in], with ids: the rows to normalise
  const std::int32_t* ids = nullptr;
  int vocab = 0;
  // argmax
  unsigned long long* keys = nullptr;
  // clear
  unsigned long long* clear = nullptr;
  int clear_words = 0;
};

// Whether rows_mma takes these operands: in a multiple of 32, strides multiples of 8, 16-byte
// aligned x and w, rows in 1..4096, and with norm a block's x rows fit its shared memory.
bool rows_mma_fits(const RowsMma& a);
Status rows_mma(const RowsMma& a, Stream stream);

// A Qwen3-style attention's q|k|v product with head_prep folded in (qkv_heads.cu): the product of
// m (x or its norm source, w, rows, in, clear; out = (q_heads + 2 kv_heads) * head_dim; y, silu and
// keys unused), whose w holds the rows of p's heads in order (q heads, k heads, v heads; k and v alone
// when p.q_heads is 0), then for each row and head what head_prep does with the product rounded to
// bf16: normed, rotated queries into p.q_out, keys into p.k_cache, values into p.v_cache (p.qkv,
// ld, k_at and v_at unused). A block per head: its warps take the head's rows whole (no split of
// the inner dimension), then its rows' norms and rotations. head_dim 64 or 128.
bool qkv_heads_fits(const RowsMma& m, const HeadPrep& p);
Status qkv_heads(const RowsMma& m, const HeadPrep& p, Stream stream);

}  // namespace tandem::kernels
