// The grouped expert GEMM on the tensor cores (moe_experts.hpp's grouped_gemm, the prefill form):
// block (M slot, N tile, expert e) computes 64 pairs x 64 outputs of expert e at a time, both
// operands staged in shared memory 64 entries of k per step with cp.async, the next step's copy in
// flight while the tensor cores take the current one. A weight tile is thus read once per 64 pairs
// (where the few-rows kernel re-reads it per eight), and the M slots of one (N tile, expert) run
// side by side, so an expert's further pair tiles find its weights in L2.
// The grid does not depend on how many pairs each expert got (no host synchronisation): a block
// strides over its expert's pair tiles by the number of M slots and exits when it runs past them.
// Four warps, 2 x 2, each 32 pairs x 32 outputs: two m16 tiles of pairs (A, rows of x) by four n8
// tiles of outputs (B, rows of W), the slab product and its k pairing from rows_mma.cuh.
// The weights come as bf16 (Bf16Tiles below) or quantised (quant_tiles.cuh), one loop for both.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "grouped_rows.cuh"
#include "rows_mma.cuh"

namespace tandem::kernels::grouped_mma {

using cuda::bf16;
constexpr int kTileM = 64, kTileN = 64, kStepK = 64, kWarps = 4, kSlots = 8;

// One stage: a 64-wide step of k as two 32-wide halves, rows 64 bytes apart. A quarter warp's
// 16-byte fragment loads (rows g, g + 1 at 16 * (lane % 4)) then touch eight distinct bank groups.
struct Stage {
  bf16 x[2][kTileM][32];
  bf16 w[2][kTileN][32];
};

// How a step's 64 x 64 weight tile reaches the stage (Stage::w): the bf16 form copies it like x;
// the quantised form (quant_tiles.cuh) loads its bytes into registers with the copy and decodes
// them into the stage while the tensor cores take the step before. Each form has:
//   begin(e, n0)      the block's expert and first output (row pointers, once a block)
//   fetch(s, step)    issue the tile's loads for `step` (a cp.async joins the step's copy group)
//   store(s)          what fetch left in registers into stage s (the bf16 form: nothing)
struct Bf16Tiles {
  const bf16* w;
  int n, k;
  const bf16* wr[4];
  __device__ __forceinline__ void begin(int e, int n0) {
    const bf16* we = w + static_cast<long>(e) * n * k;
#pragma unroll
    for (int i = 0; i < 4; ++i) wr[i] = we + static_cast<long>(min(n0 + static_cast<int>(threadIdx.x) / 8 + 16 * i, n - 1)) * k;
  }
  __device__ __forceinline__ void fetch(Stage& s, int step) {
    // Copy duty as x's: chunk tid % 8 of rows tid / 8 + 16 i; past k, zeros.
    const int tid = threadIdx.x, ch = tid % 8, kk = step * kStepK + ch * 8;
    const bool in = kk < k;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      cuda::cp_async16_fill(&s.w[ch / 4][tid / 8 + 16 * i][ch % 4 * 8], in ? wr[i] + kk : wr[i], in ? 16 : 0);
  }
  __device__ __forceinline__ void store(Stage&) {}
};

// long-function: the copy schedule, the slab loop and the epilogue belong together.
template <class Tiles>
__global__ void __launch_bounds__(kWarps * 32)
    grouped_mma_kernel(const bf16* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, Tiles tiles,
                       int n, int k, bf16* y, long ldy) {
  __shared__ __align__(16) Stage st[2];
  const int e = blockIdx.z, n0 = static_cast<int>(blockIdx.y) * kTileN;
  const int p0 = offsets[e], p1 = offsets[e + 1];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int wm = warp / 2 * 32, wn = warp % 2 * 32;  // the warp's pairs and outputs inside the tile
  const int steps = (k + kStepK - 1) / kStepK;
  // Copy duty: 8 chunks of 16 bytes a row and step; thread tid copies chunk tid % 8 of rows
  // tid / 8 + 16 i (i < 4) of x.
  const int ch = tid % 8, half = ch / 4, col = ch % 4 * 8;
  tiles.begin(e, n0);
  for (int m0 = p0 + static_cast<int>(blockIdx.x) * kTileM; m0 < p1; m0 += static_cast<int>(gridDim.x) * kTileM) {
    const bf16* xr[4];
    grouped_rows::pair_rows(x, ldx, gather, m0, p1, xr);
    auto copy = [&](int s, int step) {
      const int kk = step * kStepK + ch * 8;
      const bool in = kk < k;  // past k: zeros, which add nothing
#pragma unroll
      for (int i = 0; i < 4; ++i) cuda::cp_async16_fill(&st[s].x[half][tid / 8 + 16 * i][col], in ? xr[i] + kk : xr[i], in ? 16 : 0);
      tiles.fetch(st[s], step);
      cuda::cp_async_commit();
    };
    float acc[2][4][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[a][b][c] = 0.f;
    copy(0, 0);
    tiles.store(st[0]);
    for (int step = 0; step < steps; ++step) {
      if (step + 1 < steps) {
        copy((step + 1) % 2, step + 1);
        cuda::cp_async_wait<1>();
      } else {
        cuda::cp_async_wait<0>();
      }
      __syncthreads();
      const Stage& s = st[step % 2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint4 a[2][2], b[4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          a[mt][0] = *reinterpret_cast<const uint4*>(&s.x[h][wm + mt * 16 + g][8 * q]);
          a[mt][1] = *reinterpret_cast<const uint4*>(&s.x[h][wm + mt * 16 + g + 8][8 * q]);
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) b[nt] = *reinterpret_cast<const uint4*>(&s.w[h][wn + nt * 8 + g][8 * q]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) mma_rows::mma_slab(acc[mt][nt], a[mt][0], a[mt][1], b[nt]);
      }
      // The next step's weights into the other stage, which nobody reads until the barrier below
      // (its last readers were the step before, behind the previous barrier).
      if (step + 1 < steps) tiles.store(st[(step + 1) % 2]);
      __syncthreads();  // the stage is free for the copy two steps on
    }
    // acc[mt][nt]: pairs (g, g + 8) of m16 tile mt by outputs 2q, 2q + 1 of n8 tile nt.
    const bool pairs_ok = ldy % 2 == 0 && (reinterpret_cast<std::uintptr_t>(y) & 3) == 0;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int p = m0 + wm + mt * 16 + g + 8 * hi;
        if (p >= p1) continue;
        bf16* yr = y + static_cast<long>(p) * ldy;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int o = n0 + wn + nt * 8 + 2 * q;
          grouped_rows::store_pair(yr, o, n, acc[mt][nt][2 * hi], acc[mt][nt][2 * hi + 1], pairs_ok);
        }
      }
  }
}

// The launch: a block per (M slot, 64 outputs, expert).
template <class Tiles>
void launch(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts, Tiles tiles, int n,
            int k, void* y, long ldy, cudaStream_t stream) {
  const dim3 grid(kSlots, static_cast<unsigned>((n + kTileN - 1) / kTileN), static_cast<unsigned>(n_experts));
  grouped_mma_kernel<Tiles><<<grid, kWarps * 32, 0, stream>>>(static_cast<const bf16*>(x), ldx, gather, offsets, tiles, n, k,
                                                               static_cast<bf16*>(y), ldy);
}

}  // namespace tandem::kernels::grouped_mma
