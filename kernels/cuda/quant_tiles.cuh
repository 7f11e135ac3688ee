// The quantised weight tiles of the grouped tensor-core GEMM (grouped_mma.cuh's Tiles): expert e's
// weight is `per` matrices of a quant_gemv.hpp stack one under another (gate then up: n = per *
// rows outputs). A step's 64 x 64 tile is 256 chunks of 16 inputs (quant_chunk.cuh), two a
// thread: rows tid / 4 and tid / 4 + 32, inputs 16 (tid % 4) on. fetch loads their bytes and
// scales into registers beside the step's cp.async copies; store decodes them to bf16 into the
// stage, rounded as quant_dequant_bf16_cuda rounds, so the product is the bf16 GEMM's over the
// dequantised stack, bit for bit, without that stack ever being written.
#pragma once
#include <cstdint>

#include "grouped_mma.cuh"
#include "quant_chunk.cuh"

namespace tandem::kernels::grouped_mma {

template <QuantFormat F>
struct QuantTiles {
  QuantMatrices w;
  int per;  // matrices an expert
  int n, k;
  int m[2], o[2];  // the thread's two rows: matrix and row in it
  quant::Chunk c[2];
  __device__ __forceinline__ void begin(int e, int n0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = min(n0 + static_cast<int>(threadIdx.x) / 4 + 32 * i, n - 1);  // past the last output: repeated, unstored
      m[i] = e * per + r / w.rows, o[i] = r % w.rows;
    }
  }
  __device__ __forceinline__ void fetch(Stage&, int step) {
    const int kk = step * kStepK + static_cast<int>(threadIdx.x) % 4 * 16;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (kk < k) {
        c[i] = quant::load_chunk<F>(w, m[i], o[i], kk);
      } else {  // past k: zeros (x is zero there too)
        c[i].q = make_uint4(0u, 0u, 0u, 0u), c[i].scale = 0.f;
      }
    }
  }
  __device__ __forceinline__ void store(Stage& s) {
    const int row = static_cast<int>(threadIdx.x) / 4, part = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      unsigned v[8];
      quant::decode_bf16<F>(c[i], v);
      uint4* dst = reinterpret_cast<uint4*>(&s.w[part / 2][row + 32 * i][part % 2 * 16]);
      dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
      dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
    }
  }
};

}  // namespace tandem::kernels::grouped_mma
