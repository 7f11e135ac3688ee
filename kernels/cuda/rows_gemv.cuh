// The few-rows GEMM both the grouped expert GEMM and the skinny dense GEMM use: y[p] = W x[row(p)]
// for a handful of rows p, bf16 weights streamed once per block with fp32 sums. Memory-bound by
// design: at decode sizes (rows <= 16) the cost is reading W, which this does with 16-byte loads
// spread over every multiprocessor (a block per 32 output rows), where a tensor-core tile would
// leave most of the GPU idle.
#pragma once
#include <cstdint>

#include "common.cuh"

namespace tandem::kernels::gemv {

constexpr int kWarps = 8, kRowsPerWarp = 4, kTok = 8;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;

__device__ __forceinline__ void dot8(const uint4& a, const uint4& b, float& acc) {
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fx = __bfloat1622float2(x[i]), fy = __bfloat1622float2(y[i]);
    acc += fx.x * fy.x + fx.y * fy.y;
  }
}

// Block (row tile, group e): the rows p of group e are [offsets[e], offsets[e + 1]) (or [0, rows)
// without offsets); x row = gather[p] when given, else p; W of group e at w + e * n * k ([n, k]).
// Warp w owns output rows r0 .. r0 + 3; lanes stride over k in chunks of 8; eight rows p per pass.
template <class OutT>
__global__ void __launch_bounds__(kWarps * 32)
    rows_gemv_kernel(const cuda::bf16* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int rows,
                     const cuda::bf16* w, int n, int k, const cuda::bf16* bias, OutT* y, long ldy) {
  const int e = blockIdx.y;
  const int p0 = offsets ? offsets[e] : 0, p1 = offsets ? offsets[e + 1] : rows;
  if (p0 == p1) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp;
  if (r0 >= n) return;
  const cuda::bf16* we = w + static_cast<long>(e) * n * k;
  for (int base = p0; base < p1; base += kTok) {
    const int nt = min(kTok, p1 - base);
    const cuda::bf16* xr[kTok];
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
      const int p = base + (j < nt ? j : 0);
      xr[j] = x + static_cast<long>(gather ? gather[p] : p) * ldx;
    }
    float acc[kRowsPerWarp][kTok];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int j = 0; j < kTok; ++j) acc[r][j] = 0.f;
#pragma unroll 2
    for (int c = lane * 8; c < k; c += 32 * 8) {
      uint4 wv[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        wv[r] = r0 + r < n ? *reinterpret_cast<const uint4*>(we + static_cast<long>(r0 + r) * k + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < kTok; ++j) {
        if (j >= nt) break;
        const uint4 xv = cuda::load16(xr[j] + c);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) dot8(wv[r], xv, acc[r][j]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int j = 0; j < kTok; ++j) {
        float s = cuda::warp_sum(acc[r][j]);
        if (lane == 0 && j < nt && r0 + r < n) {
          if (bias) s += __bfloat162float(bias[r0 + r]);
          y[static_cast<long>(base + j) * ldy + r0 + r] = cuda::from_float<OutT>(s);
        }
      }
  }
}

}  // namespace tandem::kernels::gemv
