// The grouped expert GEMM on fp32 inputs into fp32 results (moe_experts.hpp: grouped_gemm_f32_cuda,
// grouped_gemm_quant_f32_cuda): glm5_next's routed experts at decode sizes, where each chosen
// expert's weight rows are read once per step (per pass of eight of its pairs) rather than once per
// (token, expert) pair. rows_gemv.cuh's few-rows kernel, with fp32 x and its weights either bf16
// or a quantised stack decoded in registers as quant_chunk.cuh does for the decode kernels.
#include <cstdint>
#include <string>

#include "common.cuh"
#include "quant_chunk.cuh"
#include "rows_gemv.cuh"
#include "tandem/kernels/moe_experts.hpp"

namespace tandem::kernels {
namespace {

using gemv::kRowsPerWarp;
using gemv::kTok;

// Expert e's outputs are its `per` matrices one under another (gate then up: per 2). Each (row,
// pair) sum is quant_pairs_f32's (quant_gemv.cu): the lane's chunks c = lane, lane + 32, ... each a
// fmaf chain over its 16 inputs added to the lane's sum, then warp_sum -- the same bits.
template <QuantFormat F>
struct QuantWeights {
  static constexpr int kChunk = 16;
  using Chunk = quant::Chunk;
  QuantMatrices w;
  int per;
  __device__ __forceinline__ Chunk load(int e, int, int, int r, int c) const {
    return quant::load_chunk<F>(w, static_cast<long>(e) * per + r / w.rows, r % w.rows, c);
  }
  __device__ __forceinline__ static Chunk zero() { return Chunk{make_uint4(0, 0, 0, 0), 0.f}; }
  __device__ __forceinline__ static void apply(const Chunk (&wv)[kRowsPerWarp], const float* const (&xr)[kTok], int nt, int c,
                                               float (&acc)[kRowsPerWarp][kTok]) {
    float d[kRowsPerWarp][16];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) quant::decode<F>(wv[r], d[r]);
#pragma unroll
    for (int j = 0; j < kTok; ++j) {
      if (j >= nt) break;
      float xv[16];
      const float4* p = reinterpret_cast<const float4*>(xr[j] + c);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = p[q];
        xv[4 * q] = v.x, xv[4 * q + 1] = v.y, xv[4 * q + 2] = v.z, xv[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 16; ++i) s = fmaf(xv[i], d[r][i], s);
        acc[r][j] += s;
      }
    }
  }
};

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

dim3 grid_of(int n, int n_experts) {
  return dim3(static_cast<unsigned>((n + gemv::kRowsPerBlock - 1) / gemv::kRowsPerBlock), static_cast<unsigned>(n_experts));
}

}  // namespace

Status grouped_gemm_f32_cuda(const float* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                             const void* w, int n, int k, float* y, long ldy, Stream stream) {
  if (n <= 0 || k <= 0 || n_experts <= 0 || n_experts > 65535 || !offsets)
    return Error{"grouped_gemm_f32: bad shape (n " + std::to_string(n) + ", k " + std::to_string(k) + ", " + std::to_string(n_experts) +
                 " experts, at most 65535, with offsets)"};
  if (k % 8 != 0 || ldx % 4 != 0 || !aligned16(x) || !aligned16(w))
    return Error{"grouped_gemm_f32: k must be a multiple of 8, ldx of 4, x and w 16-byte aligned; k " + std::to_string(k) + ", ldx " +
                 std::to_string(ldx)};
  gemv::rows_gemv_w_kernel<float, float, gemv::Bf16Weights><<<grid_of(n, n_experts), gemv::kWarps * 32, 0, stream>>>(
      x, ldx, gather, offsets, gemv::Bf16Weights{static_cast<const cuda::bf16*>(w)}, n, k, y, ldy);
  return TANDEM_CUDA_LAUNCHED("rows_gemv_w_kernel (fp32 x, bf16 experts)");
}

Status grouped_gemm_quant_f32_cuda(const float* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                                   const QuantMatrices& w, float* y, long ldy, Stream stream) {
  if (n_experts <= 0 || n_experts > 65535 || w.count <= 0 || w.count % n_experts != 0 || w.rows <= 0 || !offsets)
    return Error{"grouped_gemm_quant_f32: " + std::to_string(w.count) + " matrices do not split evenly over " + std::to_string(n_experts) +
                 " experts (at most 65535, with offsets)"};
  if (w.in <= 0 || w.in % 16 != 0 || ldx % 4 != 0 || !aligned16(x))
    return Error{"grouped_gemm_quant_f32: inputs must be a multiple of 16, ldx of 4 and x 16-byte aligned; got " + std::to_string(w.in) +
                 " and " + std::to_string(ldx)};
  if (!w.data || !w.scales || (w.format == QuantFormat::nvfp4 && !w.global) || !aligned16(w.data))
    return Error{"grouped_gemm_quant_f32: a stack without its data (16-byte aligned), scales or global scales"};
  const int per = w.count / n_experts, n = per * w.rows;
  if (w.format == QuantFormat::fp8_block)
    gemv::rows_gemv_w_kernel<float, float, QuantWeights<QuantFormat::fp8_block>><<<grid_of(n, n_experts), gemv::kWarps * 32, 0, stream>>>(
        x, ldx, gather, offsets, QuantWeights<QuantFormat::fp8_block>{w, per}, n, w.in, y, ldy);
  else
    gemv::rows_gemv_w_kernel<float, float, QuantWeights<QuantFormat::nvfp4>><<<grid_of(n, n_experts), gemv::kWarps * 32, 0, stream>>>(
        x, ldx, gather, offsets, QuantWeights<QuantFormat::nvfp4>{w, per}, n, w.in, y, ldy);
  return TANDEM_CUDA_LAUNCHED("rows_gemv_w_kernel (fp32 x, quantised experts)");
}

}  // namespace tandem::kernels
