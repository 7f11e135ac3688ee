// Reading a quantised weight (quant_gemv.hpp's stacks) 16 inputs at a time: a chunk is loaded as
// raw bytes with its scale (so a lane can have several loads in flight before any arithmetic), then
// decoded into 16 weights and dotted with 16 inputs of each activation row.
//   fp8:   16 bytes, converted pairwise by the hardware's e4m3x2 -> f16x2 conversion;
//   NVFP4: 8 bytes, each e2m1 nibble turned into an fp16 by bit placement (sign -> bit 15, the
//          exponent and mantissa bits -> bits 9..11, which reads as the value times 2^-14, also for
//          e2m1's subnormal 0.5), the 2^14 folded into the chunk's scale.
// Each weight is value * scale rounded to bf16: the dequantised weight a bf16 GEMM over the
// dequantised tensor (prefill-sized steps) multiplies by, so that every step size computes the same
// function of the checkpoint (as a bf16 model does; a DFlash verification block or a prefix-cached
// prompt must not depend on which path its step took). The rounding is exact for fp8 values; it
// is the product with the fp32 scale that it rounds.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/quant_gemv.hpp"
#include "tandem/kernels/quant_weights.hpp"

namespace tandem::kernels::quant {

// Chunks per lane in flight in the decode kernels (quant_gemv.cu, moe_decode_quant.cu): 64 bytes of
// weights either way (NVFP4 chunks are 8 bytes, fp8 16).
template <QuantFormat F>
constexpr int kLoads = F == QuantFormat::nvfp4 ? 8 : 4;

struct Chunk {
  uint4 q;      // fp8: 16 bytes; NVFP4: q.x, q.y
  float scale;  // what the chunk's sum is multiplied by
};

__device__ __forceinline__ float fp8_value(std::uint8_t b) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3)));
}

// Chunk of matrix m, row o, inputs [k, k + 16).
template <QuantFormat F>
__device__ __forceinline__ Chunk load_chunk(const QuantMatrices& w, long m, int o, int k) {
  Chunk c;
  const long row = m * w.rows + o;
  if constexpr (F == QuantFormat::fp8_block) {
    c.q = cuda::load_nc16(w.data + row * w.in + k);
    const int bc = (w.in + kFp8Block - 1) / kFp8Block, br = (w.rows + kFp8Block - 1) / kFp8Block;
    c.scale = static_cast<const float*>(w.scales)[(m * br + o / kFp8Block) * bc + k / kFp8Block];
  } else {
    const uint2 u = cuda::load_nc8(w.data + row * (w.in / 2) + k / 2);
    c.q = make_uint4(u.x, u.y, 0u, 0u);
    const std::uint8_t s = static_cast<const std::uint8_t*>(w.scales)[row * (w.in / kNvfp4Group) + k / kNvfp4Group];
    c.scale = fp8_value(s) * w.global[m] * 16384.f;  // 2^14: see the nibble placement above
  }
  return c;
}

__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The chunk's 16 dequantised weights before their rounding, as fp32 products value * scale, a pair
// at a time: f(j, p) takes inputs 2j (p.x) and 2j + 1 (p.y). The two forms below round them alike.
template <QuantFormat F, class Pair>
__device__ __forceinline__ void decode_pairs(const Chunk& c, Pair&& f) {
  if constexpr (F == QuantFormat::fp8_block) {
    const unsigned words[4] = {c.q.x, c.q.y, c.q.z, c.q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 v = cuda::fp8x2_to_float2(words[i] >> (16 * h));
        f(2 * i + h, make_float2(v.x * c.scale, v.y * c.scale));
      }
  } else {
    const unsigned words[2] = {c.q.x, c.q.y};
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const unsigned t = words[i] >> (8 * b);  // low nibble: input 2b, high nibble: 2b + 1
        const unsigned bits = ((t & 0x7u) << 9) | ((t & 0x8u) << 12) | ((t & 0x70u) << 21) | ((t & 0x80u) << 24);
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&bits));
        f(4 * i + b, make_float2(v.x * c.scale, v.y * c.scale));
      }
  }
}

// The chunk's 16 dequantised weights, rounded to bf16, as floats.
template <QuantFormat F>
__device__ __forceinline__ void decode(const Chunk& c, float* wv) {
  decode_pairs<F>(c, [&](int j, float2 p) { wv[2 * j] = bf16_round(p.x), wv[2 * j + 1] = bf16_round(p.y); });
}

// The same 16 weights as bf16, packed two a word (input 2j in the low half of word j): what the
// dequantisation writes and the tensor-core GEMMs read.
template <QuantFormat F>
__device__ __forceinline__ void decode_bf16(const Chunk& c, unsigned (&w)[8]) {
  decode_pairs<F>(c, [&](int j, float2 p) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(p.x, p.y);
    w[j] = *reinterpret_cast<const unsigned*>(&b);
  });
}

// NVFP4's 16 weights as decode_bf16 gives them, paired otherwise for the tensor cores (which take
// any pairing that x shares: pair_x_nvfp4): word 4h + i holds inputs 8h + i (low half) and
// 8h + i + 4 (high half), i < 4. Why: nibbles i and i + 4 of a 32-bit word reach their f16 places
// (magnitude -> bits 9..11 / 25..27, sign -> 15 / 31) by the same two shifts, four instructions a
// pair where decode_pairs' byte-wise placement takes about twice that.
__device__ __forceinline__ void decode_bf16_nvfp4_paired(const Chunk& c, unsigned (&w)[8]) {
  const unsigned words[2] = {c.q.x, c.q.y};
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned v = words[h];
      const unsigned mag = (i < 3 ? v << (9 - 4 * i) : v >> (4 * i - 9)) & 0x0e000e00u;
      const unsigned bits = mag | ((v << (12 - 4 * i)) & 0x80008000u);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&bits));
      const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * c.scale, f.y * c.scale);
      w[4 * h + i] = *reinterpret_cast<const unsigned*>(&b);
    }
}

// Eight bf16 inputs (four words, input 2j, 2j + 1 in word j) paired as decode_bf16_nvfp4_paired
// pairs weights: word i holds inputs i and i + 4.
__device__ __forceinline__ uint4 pair_x_nvfp4(const uint4& x) {
  return make_uint4(__byte_perm(x.x, x.z, 0x5410), __byte_perm(x.x, x.z, 0x7632), __byte_perm(x.y, x.w, 0x5410),
                    __byte_perm(x.y, x.w, 0x7632));
}

// sum_j x[j] * wv[j] over 16 bf16 inputs at x (16-byte aligned), one fmaf chain in j order.
__device__ __forceinline__ float dot16(const float* wv, const cuda::bf16* x) {
  float v[16];
  cuda::load_bf16x16(x, v);
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) s = fmaf(v[j], wv[j], s);
  return s;
}

// The same over 16 fp32 inputs at x (16-byte aligned): glm5_next's products that keep fp32 inputs.
__device__ __forceinline__ float dot16(const float* wv, const float* x) {
  const float4* p = reinterpret_cast<const float4*>(x);
  float s = 0.f;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 v = p[q];
    s = fmaf(v.x, wv[4 * q], s);
    s = fmaf(v.y, wv[4 * q + 1], s);
    s = fmaf(v.z, wv[4 * q + 2], s);
    s = fmaf(v.w, wv[4 * q + 3], s);
  }
  return s;
}

}  // namespace tandem::kernels::quant
