// What the grouped expert GEMMs' tensor-core forms share (grouped_mma.cuh: mma.sync;
// grouped_wgmma.cu: wgmma): the x rows a thread copies for a tile of an expert's pairs, and the
// store of two adjacent outputs of a pair's row.
#pragma once
#include <cstdint>

#include "common.cuh"

namespace tandem::kernels::grouped_rows {

using cuda::bf16;

// x's rows of pairs m0 + tid / 8 + 16 i (i < R) of an expert whose pairs end at p1 (row gather[p],
// or p without gather); rows past the expert's last pair repeat it and are not stored.
template <int R>
__device__ __forceinline__ void pair_rows(const bf16* x, long ldx, const std::int32_t* gather, int m0, int p1, const bf16* (&xr)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int p = min(m0 + static_cast<int>(threadIdx.x) / 8 + 16 * i, p1 - 1);
    xr[i] = x + static_cast<long>(gather ? gather[p] : p) * ldx;
  }
}

// Outputs o and o + 1 of row yr as bf16: one 4-byte store where y allows it (pairs_ok: an even
// ldy and a 4-byte aligned y) and both are in range, else each in range on its own.
__device__ __forceinline__ void store_pair(bf16* yr, int o, int n, float v0, float v1, bool pairs_ok) {
  if (pairs_ok && o + 1 < n) {
    *reinterpret_cast<__nv_bfloat162*>(yr + o) = __floats2bfloat162_rn(v0, v1);
  } else {
    if (o < n) yr[o] = __float2bfloat16_rn(v0);
    if (o + 1 < n) yr[o + 1] = __float2bfloat16_rn(v1);
  }
}

}  // namespace tandem::kernels::grouped_rows
