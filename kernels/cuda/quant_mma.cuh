// Decode-sized products over quantised weights (quant_gemv.hpp's stacks) on the tensor cores:
// mma.sync m16n8k16, f16 inputs, fp32 accumulation; 16 weight rows a tile (the m dimension), up to
// 8 activation rows as the n dimension (unused columns zero; a column's result depends only on its
// own inputs, so a row alone equals that row among others, bit for bit).
//
// Why: dequantising in the ALUs (quant_chunk.cuh: decode to f16, to float, times the scale, round
// to bf16, dot) costs about 8 lane instructions a weight, which caps fp8 decode near a third of its
// bandwidth and makes NVFP4 no faster. Here a weight costs half a conversion (fp8: one cvt a pair)
// or about three instructions (NVFP4: bit placement, one f16 multiply a pair by the group scale),
// and the tensor core does the products.
//
// The k order inside an mma step is free when A and B share it, which gives wide loads: in a block
// of 128 inputs lane (g = lane / 4, t = lane % 4) loads the 32 consecutive inputs 32t .. 32t + 31
// of weight rows g and g + 8 (fp8 32 bytes, NVFP4 16), eight mma steps; x is staged in shared
// memory as f16 in the order those steps read it (NVFP4: permuted within each 8, see stage_row).
//
// Numerics: the weight enters exactly (fp8 e4m3 -> f16 is exact; an e2m1 value times 2^-14 times
// its e4m3 group scale is an exact f16, subnormal or not, a multiple of 2^-24 with at most 3
// significant bits); x enters as f16(x * 2^-8), exact for bf16 x with 2^-6 <= |x| < 1.6e7 (below,
// f16's subnormal spacing 2^-24 adds at most 2^-17 absolute, under bf16's own rounding of such x
// only for |x| >= 2^-9; above, saturated). Per 128-input block the 16x8 products are summed in
// fp32 by the tensor core, then scaled by the block's factor (fp8: its block scale; NVFP4: the
// tensor's global scale times 2^14) into an fp32 accumulator, 2^8 applied at the end. Unlike the
// ALU kernels, the weight is not rounded to bf16 first: the result is closer to the exact product
// with the dequantised tensor, and no longer equal to a bf16 GEMM over the dequantised tensor.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/kernels/quant_weights.hpp"

namespace tandem::kernels::qmma {

using cuda::bf16;
constexpr int kK = 128;              // inputs per k block: fp8's scale block, 8 mma steps
constexpr float kXDown = 1.f / 256.f;  // x enters as f16(x * 2^-8) ...
constexpr float kXUp = 256.f;          // ... and the sums leave times 2^8

__host__ __device__ inline int kpad(int in) { return (in + kK - 1) / kK * kK; }

// x row (bf16, `in` inputs, 16-byte aligned) into dst: kpad(in) f16 of x * 2^-8, zero beyond in.
// NVFP4 stores each 8 inputs in the order 0 4 1 5 2 6 3 7 (how mma_block pairs a word's nibbles).
template <QuantFormat F>
__device__ __forceinline__ void stage_row(__half* dst, const bf16* x, int in, int tid, int threads) {
  const int groups = kpad(in) / 8;
  for (int i = tid; i < groups; i += threads) {
    float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (8 * i < in) {
      const uint4 u = *reinterpret_cast<const uint4*>(x + 8 * i);
      const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) v[2 * j] = __uint_as_float(w[j] << 16), v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    }
    __half h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float s = v[F == QuantFormat::nvfp4 ? (j % 2) * 4 + j / 2 : j] * kXDown;
      s = fabsf(s) > 65504.f ? copysignf(65504.f, s) : s;  // saturate; NaN stays NaN
      h[j] = __float2half_rn(s);
    }
    *reinterpret_cast<uint4*>(dst + 8 * i) = *reinterpret_cast<const uint4*>(h);
  }
}

// One lane's share of a 16-row tile over one k block, loaded before any arithmetic.
template <QuantFormat F>
struct Raw;
template <>
struct Raw<QuantFormat::fp8_block> {
  uint4 q[2][2];  // [row g, g + 8][inputs 32t .. +15, +16 .. +31]
  float coef;     // the block scale
};
template <>
struct Raw<QuantFormat::nvfp4> {
  uint2 q[2][2];   // [row g, g + 8][inputs 32t .. +15, +16 .. +31]: 8 bytes each
  unsigned s[2];   // [row]: the two groups' e4m3 scales, bytes 0 and 1
  float coef;      // global * 2^14
};

// Rows row0 + g, row0 + g + 8 of matrix m, k block kb (rows and inputs past the matrix read as 0).
template <QuantFormat F>
__device__ __forceinline__ void load_block(const QuantMatrices& w, long m, int row0, int kb, int lane, Raw<F>& r) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int row = row0 + g + 8 * rr;
    const long at = m * w.rows + row;
    if constexpr (F == QuantFormat::fp8_block) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = kb * kK + 32 * t + 16 * h;
        r.q[rr][h] = row < w.rows && k < w.in ? cuda::load_nc16(w.data + at * w.in + k) : make_uint4(0u, 0u, 0u, 0u);
      }
    } else {
      r.s[rr] = 0u;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = kb * kK + 32 * t + 16 * h;
        const bool in = row < w.rows && k < w.in;
        r.q[rr][h] = in ? cuda::load_nc8(w.data + at * (w.in / 2) + k / 2) : make_uint2(0u, 0u);
        if (in) r.s[rr] |= static_cast<unsigned>(__ldg(static_cast<const std::uint8_t*>(w.scales) + at * (w.in / kNvfp4Group) + k / kNvfp4Group)) << (8 * h);
      }
    }
  }
  if constexpr (F == QuantFormat::fp8_block) {
    const int bc = (w.in + kFp8Block - 1) / kFp8Block, br = (w.rows + kFp8Block - 1) / kFp8Block;
    r.coef = __ldg(static_cast<const float*>(w.scales) + (m * br + row0 / kFp8Block) * bc + kb);
  } else {
    r.coef = __ldg(w.global + m) * 16384.f;  // 2^14: the nibble placement's 2^-14
  }
}

__device__ __forceinline__ void mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned fp8x2_to_f16x2(unsigned v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return static_cast<unsigned>(h.x) | (static_cast<unsigned>(h.y) << 16);
}

__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
  unsigned d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Nibbles n (low half) and n + 4 (high half) of word w as f16 value * 2^-14 (sign -> bit 15,
// magnitude bits -> 9..11), given mag = w & 0x77777777 and sgn = w & 0x88888888.
template <int N>
__device__ __forceinline__ unsigned nibble_pair(unsigned mag, unsigned sgn) {
  const unsigned m = N * 4 <= 9 ? mag << (9 - 4 * N) : mag >> (4 * N - 9);
  return (m & 0x0e000e00u) | ((sgn << (12 - 4 * N)) & 0x80008000u);
}

// acc (this lane's 4 of the tile's 16 x 8 results) += mult * coef * (tile rows . x) over block kb.
// xrow: the lane's column (x row g) as stage_row laid it out, or nullptr for an unused column.
template <QuantFormat F>
__device__ __forceinline__ void mma_block(const Raw<F>& r, const __half* xrow, int kb, int lane, float mult, float* acc) {
  const int t = lane % 4;
  const uint4* xb = xrow ? reinterpret_cast<const uint4*>(xrow + kb * kK + 32 * t) : nullptr;
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  if constexpr (F == QuantFormat::fp8_block) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // 16 bytes of x (8 inputs): two steps
      const uint4 b = xb ? xb[i] : make_uint4(0u, 0u, 0u, 0u);
      const uint4& lo = r.q[0][i / 2];
      const uint4& hi = r.q[1][i / 2];
      const unsigned wl[2] = {i % 2 ? lo.z : lo.x, i % 2 ? lo.w : lo.y}, wh[2] = {i % 2 ? hi.z : hi.x, i % 2 ? hi.w : hi.y};
#pragma unroll
      for (int s = 0; s < 2; ++s)
        mma(c, fp8x2_to_f16x2(wl[s]), fp8x2_to_f16x2(wh[s]), fp8x2_to_f16x2(wl[s] >> 16), fp8x2_to_f16x2(wh[s] >> 16), s ? b.z : b.x,
            s ? b.w : b.y);
    }
  } else {
    unsigned sc[2][2];  // [row][group]: the scale as f16x2 (s, s)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned byte = (r.s[rr] >> (8 * h)) & 0xffu;
        sc[rr][h] = fp8x2_to_f16x2(byte | (byte << 8));
      }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // word i: inputs 8i .. 8i + 7 of the lane's 32, two steps
      const uint4 b = xb ? xb[i] : make_uint4(0u, 0u, 0u, 0u);
      unsigned a[2][4];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const uint2& q = r.q[rr][i / 2];
        const unsigned w = i % 2 ? q.y : q.x, mag = w & 0x77777777u, sgn = w & 0x88888888u, s = sc[rr][i / 2];
        a[rr][0] = hmul2(nibble_pair<0>(mag, sgn), s), a[rr][1] = hmul2(nibble_pair<1>(mag, sgn), s);
        a[rr][2] = hmul2(nibble_pair<2>(mag, sgn), s), a[rr][3] = hmul2(nibble_pair<3>(mag, sgn), s);
      }
      mma(c, a[0][0], a[1][0], a[0][1], a[1][1], b.x, b.y);
      mma(c, a[0][2], a[1][2], a[0][3], a[1][3], b.z, b.w);
    }
  }
  const float f = mult * r.coef;
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = fmaf(f, c[i], acc[i]);
}

// The block's warps' fragments summed in warp order (fixed: deterministic) into out[16][8]
// (row, column), times 2^8. red: warps * 128 floats. Ends with the block synchronised.
__device__ __forceinline__ void combine(const float* acc, float* red, float* out, int warps) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < 4; ++i) red[(warp * 32 + lane) * 4 + i] = acc[i];
  __syncthreads();
  if (threadIdx.x < 128) {
    const int l = threadIdx.x / 4, i = threadIdx.x % 4;
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += red[(w * 32 + l) * 4 + i];
    // c0, c1: row g, columns 2t, 2t + 1; c2, c3: row g + 8.
    out[(l / 4 + 8 * (i / 2)) * 8 + 2 * (l % 4) + i % 2] = s * kXUp;
  }
  __syncthreads();
}

// The launches (quant_mma.cu), taken by quant_gemv_cuda and moe_decode_quant_cuda when
// quant_mma_on() and the staged x fits in shared memory.
bool gemv_fits(const QuantGemvArgs& a);
cudaError_t gemv_cuda(const QuantGemvArgs& a, Stream stream);
bool moe_fits(const MoeDecodeArgs& a);
Status moe_cuda(const MoeDecodeArgs& a, const MoeDecodeQuant& q, Stream stream);

}  // namespace tandem::kernels::qmma
