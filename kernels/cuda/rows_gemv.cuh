// The few-rows GEMM both the grouped expert GEMM and the skinny dense GEMM use: y[p] = W x[row(p)]
// for a handful of rows p, bf16 weights (or, for glm5_next's experts, quantised ones decoded in
// registers: moe_experts_f32.cu) streamed once per block with fp32 sums. Memory-bound by
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

// The weights of rows_gemv_body, as a policy: Chunk (one lane's kChunk consecutive inputs of one
// row, as loaded), load (expert e's row r at input c; e's matrix at w + e * n * k) and apply (a pass's
// loaded chunks of the warp's kRowsPerWarp rows times the pass's x rows into acc[row][x row]).
// Bf16Weights with bf16 x is the original kernel; with fp32 x (glm5_next's routed experts keep
// their inputs in fp32) each x chunk is read as 8 floats.
struct Bf16Weights {
  static constexpr int kChunk = 8;
  using Chunk = uint4;
  const cuda::bf16* w;
  __device__ __forceinline__ Chunk load(int e, int n, int k, int r, int c) const {
    return *reinterpret_cast<const uint4*>(w + (static_cast<long>(e) * n + r) * k + c);
  }
  __device__ __forceinline__ static Chunk zero() { return make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ static void apply(const Chunk (&wv)[kRowsPerWarp], const cuda::bf16* const (&xr)[kTok], int nt, int c,
                                               float (&acc)[kRowsPerWarp][kTok]) {
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
      if (j >= nt) break;
      const uint4 xv = cuda::load16(xr[j] + c);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) dot8(wv[r], xv, acc[r][j]);
    }
  }
  __device__ __forceinline__ static void apply(const Chunk (&wv)[kRowsPerWarp], const float* const (&xr)[kTok], int nt, int c,
                                               float (&acc)[kRowsPerWarp][kTok]) {
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
      if (j >= nt) break;
      const float4 a = *reinterpret_cast<const float4*>(xr[j] + c), b = *reinterpret_cast<const float4*>(xr[j] + c + 4);
      const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv[r]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 fw = __bfloat1622float2(w2[i]);
          acc[r][j] += xv[2 * i] * fw.x + xv[2 * i + 1] * fw.y;
        }
      }
    }
  }
};

// Block (row tile, group e): the rows p of group e are [offsets[e], offsets[e + 1]) (or [0, rows)
// without offsets); x row = gather[p] when given, else p; W of group e at w + e * n * k ([n, k]).
// Warp w owns output rows r0 .. r0 + 3; lanes stride over k in chunks of W::kChunk; eight rows p
// per pass. Each (row, p) sum runs over its lane's chunks in order, then warp_sum: a row p's result
// does not depend on which other rows share its pass.
template <class OutT, class XT, class W>
__device__ __forceinline__ void rows_gemv_body(const XT* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int rows,
                                               const W& w, int n, int k, const cuda::bf16* bias, OutT* y, long ldy) {
  const int e = blockIdx.y;
  const int p0 = offsets ? offsets[e] : 0, p1 = offsets ? offsets[e + 1] : rows;
  if (p0 == p1) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * kRowsPerBlock + warp * kRowsPerWarp;
  if (r0 >= n) return;
  for (int base = p0; base < p1; base += kTok) {
    const int nt = min(kTok, p1 - base);
    const XT* xr[kTok];
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
    for (int c = lane * W::kChunk; c < k; c += 32 * W::kChunk) {
      typename W::Chunk wv[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) wv[r] = r0 + r < n ? w.load(e, n, k, r0 + r, c) : W::zero();
      W::apply(wv, xr, nt, c, acc);
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

template <class OutT>
__global__ void __launch_bounds__(kWarps * 32)
    rows_gemv_kernel(const cuda::bf16* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int rows,
                     const cuda::bf16* w, int n, int k, const cuda::bf16* bias, OutT* y, long ldy) {
  rows_gemv_body(x, ldx, gather, offsets, rows, Bf16Weights{w}, n, k, bias, y, ldy);
}

// The same over other weights or x types (moe_experts_f32.cu: fp32 x, bf16 or quantised weights).
template <class OutT, class XT, class W>
__global__ void __launch_bounds__(kWarps * 32)
    rows_gemv_w_kernel(const XT* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, W w, int n, int k, OutT* y,
                       long ldy) {
  rows_gemv_body(x, ldx, gather, offsets, 0, w, n, k, static_cast<const cuda::bf16*>(nullptr), y, ldy);
}

}  // namespace tandem::kernels::gemv
