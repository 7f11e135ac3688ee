// The grouped expert GEMM (moe_experts.hpp's grouped_gemm, GroupedForm::wgmma) on Hopper's
// warpgroup MMA, bf16 weights. Built for the sm_90a target only (kernels/CMakeLists.txt):
// elsewhere the kernel is empty and grouped_wgmma_ready() says no.
//
// The walk is grouped_mma.cuh's: a block per (M slot, 128 outputs, expert e) strides over e's
// 64-pair tiles by the number of slots (no host synchronisation: the grid does not depend on the
// routing). One warpgroup a block computes a tile of 64 pairs x 128 outputs: per 64-wide step of k,
// x's rows (gathered) and W's rows staged by cp.async in 128-byte swizzled shared memory
// (wgmma.cuh), four steps in flight; the products are wgmma m64n64k16 with both operands in shared
// memory, two per 16 of k (outputs 0..63 and 64..127), issued asynchronously while the next
// steps' copies land. A pair's sums depend on its own row alone (any tile, any slot), so the
// bits do not depend on how the pairs are routed; they differ from the mma.sync form's (another
// summation order).
#include <cstdint>

#include "common.cuh"
#include "grouped_rows.cuh"
#include "grouped_wgmma.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "wgmma.cuh"

namespace tandem::kernels::grouped_wgmma {
namespace {

using cuda::bf16;
constexpr int kTileM = 64, kTileN = 128, kStepK = 64, kStages = 4, kSlots = 8, kThreads = 128;
constexpr size_t kStageBytes = static_cast<size_t>(kTileM + kTileN) * kStepK * 2;
constexpr size_t kSmemBytes = kStages * kStageBytes + 1024;  // + the slack to start on 1024 bytes

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The block's tile's products over k, into acc (two 64 x 64 halves); stage s holds x's 64 rows then
// W's 128 rows of one step. long-function: the copy pipeline and the products share the stages.
__device__ __forceinline__ void tile_products(bf16* stages, const bf16* const (&xr)[4], const bf16* const (&wr)[8], int k,
                                              float (&acc)[2][8][4]) {
  const int tid = threadIdx.x, ch = tid % 8;  // thread tid copies 16-byte piece ch of rows tid / 8 + 16 i
  const int steps = (k + kStepK - 1) / kStepK;
  auto xs = [&](int s) { return stages + s * (kStageBytes / 2); };
  auto ws = [&](int s) { return xs(s) + kTileM * kStepK; };
  auto copy = [&](int step) {
    if (step < steps) {
      const int s = step % kStages, kk = step * kStepK + ch * 8;
      const bool in = kk < k;  // past k: zeros, which add nothing
#pragma unroll
      for (int i = 0; i < 4; ++i)
        cuda::cp_async16_fill(xs(s) + cuda::sw128(tid / 8 + 16 * i, ch * 8, kTileM), in ? xr[i] + kk : xr[i], in ? 16 : 0);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        cuda::cp_async16_fill(ws(s) + cuda::sw128(tid / 8 + 16 * i, ch * 8, kTileN), in ? wr[i] + kk : wr[i], in ? 16 : 0);
    }
    cuda::cp_async_commit();  // empty groups past the last step keep the count of groups in flight
  };
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i][0] = acc[h][i][1] = acc[h][i][2] = acc[h][i][3] = 0.f;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) copy(s);
  for (int step = 0; step < steps; ++step) {
    cuda::cp_async_wait<kStages - 2>();  // this step's copy landed (this thread's part)
    cuda::fence_proxy_async();
    __syncthreads();  // ... and everyone's
    const int s = step % kStages;
    cuda::wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < kStepK / 16; ++k16) {
      const std::uint64_t a = cuda::sw128_desc(xs(s) + k16 * 16, 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) cuda::wgmma_m64n64k16_ss(acc[h], a, cuda::sw128_desc(ws(s) + h * 64 * kStepK + k16 * 16, 16), 1);
    }
    cuda::wgmma_commit();
    cuda::wgmma_wait<1>();  // the step before is done with its stage ...
    __syncthreads();        // ... in every warp (each tracks its own part of the products)
    copy(step + kStages - 1);  // into that stage
  }
  cuda::wgmma_wait<0>();
  cuda::wgmma_settle(acc[0]);
  cuda::wgmma_settle(acc[1]);
}
#endif

__global__ void __launch_bounds__(kThreads) grouped_wgmma_kernel(const bf16* x, long ldx, const std::int32_t* gather,
                                                                 const std::int32_t* offsets, const bf16* w, int n, int k, bf16* y,
                                                                 long ldy) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint4 smem_raw[];
  const unsigned pad = (1024 - cuda::smem_addr(smem_raw) % 1024) % 1024;
  bf16* stages = reinterpret_cast<bf16*>(reinterpret_cast<char*>(smem_raw) + pad);
  const int e = blockIdx.z, n0 = static_cast<int>(blockIdx.y) * kTileN;
  const int p0 = offsets[e], p1 = offsets[e + 1];
  const int tid = threadIdx.x, warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  // W's rows of this block (rows past n repeat the last, unstored).
  const bf16* wr[8];
  const bf16* we = w + static_cast<long>(e) * n * k;
#pragma unroll
  for (int i = 0; i < 8; ++i) wr[i] = we + static_cast<long>(min(n0 + tid / 8 + 16 * i, n - 1)) * k;
  const bool pairs_ok = ldy % 2 == 0 && (reinterpret_cast<std::uintptr_t>(y) & 3) == 0;
  for (int m0 = p0 + static_cast<int>(blockIdx.x) * kTileM; m0 < p1; m0 += static_cast<int>(gridDim.x) * kTileM) {
    const bf16* xr[4];
    grouped_rows::pair_rows(x, ldx, gather, m0, p1, xr);
    float acc[2][8][4];
    tile_products(stages, xr, wr, k, acc);
    // acc[h][i]: pairs 16 warp + g (+ 8) by outputs 64 h + 8 i + 2t, + 1.
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int p = m0 + warp * 16 + g + 8 * hi;
      if (p >= p1) continue;
      bf16* yr = y + static_cast<long>(p) * ldy;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int o = n0 + 64 * h + 8 * i + 2 * t;
          grouped_rows::store_pair(yr, o, n, acc[h][i][2 * hi], acc[h][i][2 * hi + 1], pairs_ok);
        }
    }
    __syncthreads();  // the stages are free for the next tile's copies
  }
#else
  (void)x, (void)ldx, (void)gather, (void)offsets, (void)w, (void)n, (void)k, (void)y, (void)ldy;
#endif
}

}  // namespace
}  // namespace tandem::kernels::grouped_wgmma

namespace tandem::kernels {

bool grouped_wgmma_ready() {
  static const bool ready = cuda::wgmma_device(grouped_wgmma::kSmemBytes);
  return ready;
}

Status grouped_wgmma_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts, const void* w,
                          int n, int k, void* y, long ldy, Stream stream) {
  using namespace grouped_wgmma;
  if (!grouped_wgmma_ready())
    return Error{"grouped_gemm: the wgmma form needs an sm_90 GPU (H100 / H200) and a build with the sm_90a target"};
  static const cudaError_t configured =
      cudaFuncSetAttribute(grouped_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (configured != cudaSuccess) return TANDEM_CUDA_STATUS(configured, "grouped_gemm (wgmma): shared memory attribute");
  const dim3 grid(kSlots, static_cast<unsigned>((n + kTileN - 1) / kTileN), static_cast<unsigned>(n_experts));
  grouped_wgmma_kernel<<<grid, kThreads, kSmemBytes, stream>>>(static_cast<const bf16*>(x), ldx, gather, offsets, static_cast<const bf16*>(w),
                                                               n, k, static_cast<bf16*>(y), ldy);
  return TANDEM_CUDA_LAUNCHED("grouped_wgmma_kernel");
}

}  // namespace tandem::kernels
