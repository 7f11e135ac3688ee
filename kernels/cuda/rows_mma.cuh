// Device helpers of the tensor-core row products (rows_mma.cu, qkv_heads.cu): the m16n8k16
// product of one 32-wide slab, the argmax key, and the rows a block normalises into shared memory.
// A thread's weight and x loads are 16 bytes (8 consecutive entries of its row at 8 * (lane % 4)):
// the two products of a slab take entries 0..3 and 4..7 of those eight as their k pairs, for A and
// B alike, so the pairing of weights with x entries holds whatever the tensor cores' own k order.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/rows_mma.hpp"

namespace tandem::kernels::mma_rows {

using cuda::bf16;
constexpr int kWarps = 4, kPad = 32;  // x rows staged in shared memory: in + kPad entries apart (no bank conflicts)

// Both products of one slab: rows g (r0) and g + 8 (r1) of the weight tile, x entries xv.
__device__ __forceinline__ void mma_slab(float (&c)[4], const uint4& r0, const uint4& r1, const uint4& xv) {
  cuda::mma_m16n8k16(c, r0.x, r1.x, r0.y, r1.y, xv.x, xv.y);
  cuda::mma_m16n8k16(c, r0.z, r1.z, r0.w, r1.w, xv.z, xv.w);
}

// sampling.cu's argmax key: order key of the value above, the index's complement below.
__device__ __forceinline__ unsigned long long argmax_key(float v, int index) {
  const std::uint32_t u = __float_as_uint(v == 0.f ? 0.f : v);
  const std::uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(k) << 32) | (0xffffffffu - static_cast<unsigned>(index));
}

// The block's x rows n_base .. n_base + 8 NT - 1 as rmsnorm(x32 + delta) * norm_w into xs (a warp a
// row, zero rows past the last), the residual after the add into x32_out by the first column.
__device__ inline void stage_normed(const RowsMma& a, int n_base, int rows_here, bf16* xs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, lds = a.in + kPad;
  const bf16* d = static_cast<const bf16*>(a.delta);
  const bf16* nw = static_cast<const bf16*>(a.norm_w);
  for (int rr = warp; rr < rows_here; rr += kWarps) {
    const int r = n_base + rr;
    bf16* xr = xs + static_cast<long>(rr) * lds;
    if (r >= a.rows) {
      for (int i = lane; i < a.in; i += 32) xr[i] = __float2bfloat16_rn(0.f);
      continue;
    }
    const long src = (a.pick ? a.pick[r] : r) * static_cast<long>(a.in);
    const float* x = a.x32 ? a.x32 + src : nullptr;
    const bf16* e = nullptr;  // the embedding row (a null one: zeros)
    if (a.table) {
      const std::int32_t id = a.ids[a.pick ? a.pick[r] : r];
      if (id >= 0 && id < a.vocab) e = static_cast<const bf16*>(a.table) + static_cast<long>(id) * a.in;
    }
    auto value = [&](int i) {
      if (a.table) return 0.f + (e ? __bfloat162float(e[i]) : 0.f);
      return x[i] + (d ? __bfloat162float(d[src + i]) : 0.f);
    };
    float s = 0.f;
    for (int i = lane; i < a.in; i += 32) {
      const float v = value(i);
      s += v * v;
      if (a.x32_out && blockIdx.x == 0) a.x32_out[src + i] = v;
    }
    const float rs = rsqrtf(cuda::warp_sum(s) / static_cast<float>(a.in) + a.eps);
    for (int i = lane; i < a.in; i += 32) xr[i] = __float2bfloat16_rn(value(i) * rs * __bfloat162float(nw[i]));
  }
}

}  // namespace tandem::kernels::mma_rows
