// The glue between a Qwen3-style attention's fused q|k|v projection and its paged attention, in one
// launch for what rmsnorm_rows (per head, queries and keys), rope_cuda (half layout, both) and
// write_kv_cuda do one after another (the DFlash drafter's layers: engine/spec_decode/cuda), with
// the same roundings, bit for bit: for each token t of qkv ([T, ld] bf16),
//   q_out[t][h]          = rope(rmsnorm(q head h) * q_norm)  at pos[t]     (q_heads > 0 only)
//   k_cache[slot[t]][g]  = rope(rmsnorm(k head g at k_at) * k_norm) at pos[t]
//   v_cache[slot[t]][g]  = v head g at v_at
// A token whose slot is negative writes no cache row. bf16 activations and caches; nvcc compiles
// this header as C++17: plain types only.
#pragma once
#include <cstdint>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

struct HeadPrep {
  const void* qkv = nullptr;
  long ld = 0, k_at = 0, v_at = 0;  // row stride, first key entry, first value entry
  int tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  const void* q_norm = nullptr;  // [head_dim] bf16 (unused without q_heads)
  const void* k_norm = nullptr;  // [head_dim] bf16
  float eps = 0.f;
  const float* inv_freq = nullptr;  // [head_dim / 2], rope_inv_freq's
  const std::int32_t* pos = nullptr;
  const std::int32_t* slot = nullptr;
  void* q_out = nullptr;                          // [T, q_heads * head_dim]
  void* k_cache = nullptr, *v_cache = nullptr;    // [slots, kv_heads * head_dim]
};

// The head sizes head_prep takes: even (rotary pairs) up to 256 (a warp per head, each lane holding
// the entries rmsnorm_rows's threads hold, so the sums round alike).
bool head_prep_fits(int head_dim);
Status head_prep(const HeadPrep& p, Stream stream);

}  // namespace tandem::kernels
