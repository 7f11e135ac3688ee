// The grouped expert GEMM (moe_experts.hpp's grouped_gemm, GroupedForm::wgmma) on Hopper's
// warpgroup MMA, bf16 weights. Built for the sm_90a target only (kernels/CMakeLists.txt):
// elsewhere the kernel is empty and grouped_wgmma_ready() says no.
//
// The walk is grouped_mma.cuh's: a block per (M slot, 128 outputs, expert e) strides over e's
// pair tiles by the number of slots (no host synchronisation: the grid does not depend on the
// routing). One warpgroup a block computes a tile of 64 or 128 pairs (WgmmaTile::pairs: 128 stages
// each weight tile once for twice the pairs; the decoder takes it where experts average 256) x 128
// outputs: per 64-wide step of k, x's rows (gathered) and W's rows staged by cp.async in 128-byte
// swizzled shared memory (wgmma.cuh), WgmmaTile::stages steps in flight (fewer stages, more
// blocks an SM); the products are wgmma m64n64k16 with both operands in shared memory, per 16 of k
// one for each 64 pairs x 64 outputs, issued asynchronously while the next steps' copies land.
// The SiLU form (grouped_gemm_silu) takes a tile's 128 weight rows as 64 gate rows and the 64 up
// rows of the same outputs, so a thread holds both halves of each of its outputs and writes
// silu(g) * u (g and u rounded to bf16 first, as the unfused pair of launches stores them).
// A pair's sums depend on its own row alone (any tile size, any slot), so the bits do not depend
// on how the pairs are routed or tiled; they differ from the mma.sync form's (another summation
// order).
#include <cstdint>

#include "common.cuh"
#include "grouped_rows.cuh"
#include "grouped_wgmma.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "wgmma.cuh"

namespace tandem::kernels::grouped_wgmma {
namespace {

using cuda::bf16;
constexpr int kTileN = 128, kStepK = 64, kSlots = 8, kThreads = 128;

template <int MT, int Stages>
struct Shape {
  static constexpr int tile_m = 64 * MT;
  static constexpr size_t stage_bytes = static_cast<size_t>(tile_m + kTileN) * kStepK * 2;
  static constexpr size_t smem_bytes = Stages * stage_bytes + 1024;  // + the slack to start on 1024 bytes
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The block's tile's products over k, into acc (MT x two 64 x 64 blocks); a stage holds x's 64 MT
// rows then W's 128 rows of one step. long-function: the copy pipeline and the products share the
// stages.
template <int MT, int Stages>
__device__ __forceinline__ void tile_products(bf16* stages, const bf16* const (&xr)[4 * MT], const bf16* const (&wr)[8], int k,
                                              float (&acc)[MT][2][8][4]) {
  using S = Shape<MT, Stages>;
  const int tid = threadIdx.x, ch = tid % 8;  // thread tid copies 16-byte piece ch of rows tid / 8 + 16 i
  const int steps = (k + kStepK - 1) / kStepK;
  auto xs = [&](int s) { return stages + s * (S::stage_bytes / 2); };
  auto ws = [&](int s) { return xs(s) + S::tile_m * kStepK; };
  auto copy = [&](int step) {
    if (step < steps) {
      const int s = step % Stages, kk = step * kStepK + ch * 8;
      const bool in = kk < k;  // past k: zeros, which add nothing
      auto piece = [&](bf16* dst, const bf16* src) { cuda::cp_async16_fill(dst, in ? src + kk : src, in ? 16 : 0); };
#pragma unroll
      for (int i = 0; i < 4 * MT; ++i) piece(xs(s) + cuda::sw128(tid / 8 + 16 * i, ch * 8, S::tile_m), xr[i]);
#pragma unroll
      for (int i = 0; i < 8; ++i) piece(ws(s) + cuda::sw128(tid / 8 + 16 * i, ch * 8, kTileN), wr[i]);
    }
    cuda::cp_async_commit();  // empty groups past the last step keep the count of groups in flight
  };
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[m][h][i][0] = acc[m][h][i][1] = acc[m][h][i][2] = acc[m][h][i][3] = 0.f;
#pragma unroll
  for (int s = 0; s < Stages - 1; ++s) copy(s);
  for (int step = 0; step < steps; ++step) {
    cuda::cp_async_wait<Stages - 2>();  // this step's copy landed (this thread's part)
    cuda::fence_proxy_async();
    __syncthreads();  // ... and everyone's
    const int s = step % Stages;
    cuda::wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < kStepK / 16; ++k16)
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const std::uint64_t a = cuda::sw128_desc(xs(s) + m * 64 * kStepK + k16 * 16, 16);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          cuda::wgmma_m64n64k16_ss(acc[m][h], a, cuda::sw128_desc(ws(s) + h * 64 * kStepK + k16 * 16, 16), 1);
      }
    cuda::wgmma_commit();
    cuda::wgmma_wait<1>();  // the step before is done with its stage ...
    __syncthreads();        // ... in every warp (each tracks its own part of the products)
    copy(step + Stages - 1);  // into that stage
  }
  cuda::wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    cuda::wgmma_settle(acc[m][0]);
    cuda::wgmma_settle(acc[m][1]);
  }
}

// Stores sub-tile m's results: rows m0 + 64 m + 16 warp + g (+ 8). Plain: outputs n0 + 64 h + 8 i
// + 2t (+ 1) of n; SiLU: silu(gate) * up of outputs d0 + 8 i + 2t (+ 1) of d.
template <bool Silu>
__device__ __forceinline__ void store_tile(const float (&acc)[2][8][4], int m0, int p1, int n0, int n, bf16* y, long ldy, bool pairs_ok) {
  const int tid = threadIdx.x, warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int p = m0 + warp * 16 + g + 8 * hi;
    if (p >= p1) continue;
    bf16* yr = y + static_cast<long>(p) * ldy;
    if constexpr (Silu) {
      auto r = [](float v) { return __bfloat162float(__float2bfloat16_rn(v)); };  // as gate_up is stored
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int o = n0 + 8 * i + 2 * t;
        grouped_rows::store_pair(yr, o, n, cuda::silu_mul(r(acc[0][i][2 * hi]), r(acc[1][i][2 * hi])),
                                 cuda::silu_mul(r(acc[0][i][2 * hi + 1]), r(acc[1][i][2 * hi + 1])), pairs_ok);
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 8; ++i)
          grouped_rows::store_pair(yr, n0 + 64 * h + 8 * i + 2 * t, n, acc[h][i][2 * hi], acc[h][i][2 * hi + 1], pairs_ok);
    }
  }
}
#endif

// n: outputs of y (for the SiLU form d, half of W's rows: gate rows 0..d-1, up rows d..2d-1).
// 64 pairs x 3 stages asks for three blocks an SM (at most 168 registers; the 73 KB of stages
// allow it), which is what fewer stages are for; the others fit two (registers or stages).
template <int MT, int Stages, bool Silu>
__global__ void __launch_bounds__(kThreads, MT == 1 && Stages == 3 ? 3 : 1) grouped_wgmma_kernel(const bf16* x, long ldx, const std::int32_t* gather,
                                                                 const std::int32_t* offsets, const bf16* w, int n, int k, bf16* y,
                                                                 long ldy) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<MT, Stages>;
  extern __shared__ uint4 smem_raw[];
  const unsigned pad = (1024 - cuda::smem_addr(smem_raw) % 1024) % 1024;
  bf16* stages = reinterpret_cast<bf16*>(reinterpret_cast<char*>(smem_raw) + pad);
  const int e = blockIdx.z, n0 = static_cast<int>(blockIdx.y) * (Silu ? kTileN / 2 : kTileN);
  const int p0 = offsets[e], p1 = offsets[e + 1];
  const int tid = threadIdx.x;
  // W's rows of this block (rows past the outputs repeat the last, unstored).
  const bf16* wr[8];
  const bf16* we = w + static_cast<long>(e) * (Silu ? 2 * n : n) * k;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = tid / 8 + 16 * i;
    const int row = Silu ? min(n0 + r % 64, n - 1) + (r < 64 ? 0 : n) : min(n0 + r, n - 1);
    wr[i] = we + static_cast<long>(row) * k;
  }
  const bool pairs_ok = ldy % 2 == 0 && (reinterpret_cast<std::uintptr_t>(y) & 3) == 0;
  for (int m0 = p0 + static_cast<int>(blockIdx.x) * S::tile_m; m0 < p1; m0 += static_cast<int>(gridDim.x) * S::tile_m) {
    const bf16* xr[4 * MT];
    grouped_rows::pair_rows(x, ldx, gather, m0, p1, xr);
    float acc[MT][2][8][4];
    tile_products<MT, Stages>(stages, xr, wr, k, acc);
#pragma unroll
    for (int m = 0; m < MT; ++m) store_tile<Silu>(acc[m], m0 + 64 * m, p1, n0, n, y, ldy, pairs_ok);
    __syncthreads();  // the stages are free for the next tile's copies
  }
#else
  (void)x, (void)ldx, (void)gather, (void)offsets, (void)w, (void)n, (void)k, (void)y, (void)ldy;
#endif
}

template <int MT, int Stages, bool Silu>
Status launch(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts, const void* w, int n, int k,
              void* y, long ldy, Stream stream) {
  using S = Shape<MT, Stages>;
  auto* kernel = grouped_wgmma_kernel<MT, Stages, Silu>;
  static const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::smem_bytes));
  if (configured != cudaSuccess) return TANDEM_CUDA_STATUS(configured, "grouped_gemm (wgmma): shared memory attribute");
  const int tile_n = Silu ? kTileN / 2 : kTileN;
  const dim3 grid(kSlots, static_cast<unsigned>((n + tile_n - 1) / tile_n), static_cast<unsigned>(n_experts));
  kernel<<<grid, kThreads, S::smem_bytes, stream>>>(static_cast<const bf16*>(x), ldx, gather, offsets, static_cast<const bf16*>(w), n, k,
                                                    static_cast<bf16*>(y), ldy);
  return TANDEM_CUDA_LAUNCHED("grouped_wgmma_kernel");
}

template <bool Silu>
Status launch(WgmmaTile tile, const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
              const void* w, int n, int k, void* y, long ldy, Stream stream) {
  if (tile.pairs == 128)
    return tile.stages == 3 ? launch<2, 3, Silu>(x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream)
                            : launch<2, 4, Silu>(x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream);
  return tile.stages == 3 ? launch<1, 3, Silu>(x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream)
                          : launch<1, 4, Silu>(x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream);
}

}  // namespace
}  // namespace tandem::kernels::grouped_wgmma

namespace tandem::kernels {

bool grouped_wgmma_ready() {
  static const bool ready = cuda::wgmma_device(grouped_wgmma::Shape<2, 4>::smem_bytes);
  return ready;
}

Status grouped_wgmma_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts, const void* w,
                          int n, int k, void* y, long ldy, Stream stream, WgmmaTile tile, bool silu) {
  if (!grouped_wgmma_ready())
    return Error{"grouped_gemm: the wgmma form needs an sm_90 GPU (H100 / H200) and a build with the sm_90a target"};
  if ((tile.pairs != 64 && tile.pairs != 128) || (tile.stages != 3 && tile.stages != 4))
    return Error{"grouped_gemm (wgmma): tiles of 64 or 128 pairs and 3 or 4 stages, got " + std::to_string(tile.pairs) + " pairs, " +
                 std::to_string(tile.stages) + " stages"};
  return silu ? grouped_wgmma::launch<true>(tile, x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream)
              : grouped_wgmma::launch<false>(tile, x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream);
}

}  // namespace tandem::kernels
