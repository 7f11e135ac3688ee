// Hopper's tensor memory accelerator (TMA) for kernels built for sm_90a: a 2-D bf16 tensor map
// whose boxes land in shared memory in the 128-byte swizzled layout wgmma reads (wgmma.cuh's
// slabs: 64 columns x rows, 1024-byte aligned), and the mbarrier that counts a load's bytes.
// One thread issues a chunk's boxes; every thread waits on the barrier's phase.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common.cuh"

namespace tandem::kernels::cuda {

// A [rows][cols] bf16 tensor at `base` (rows `row_stride` elements apart), read in boxes of 64
// columns x 64 rows; reads past it give zeros. False (with why) where the driver refuses.
inline Status encode_bf16_map(CUtensorMap& map, const void* base, long cols, long rows, long row_stride) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
    const cudaError_t r = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t r = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &q);
#endif
    if (r != cudaSuccess) (void)cudaGetLastError();  // not left for the next launch's check to report
    return r == cudaSuccess && q == cudaDriverEntryPointSuccess ? reinterpret_cast<Encode>(fn) : static_cast<Encode>(nullptr);
  }();
  if (!encode) return Error{"tensor map: the driver has no cuTensorMapEncodeTiled"};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * 2};
  const cuuint32_t box[2] = {64, 64}, step[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, step,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return Error{"tensor map: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) + ")"};
  return {};
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(std::uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
// After the inits, before the barrier that publishes them.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// The issuing thread's arrival, expecting `bytes` of loads to complete the phase.
__device__ __forceinline__ void mbar_expect(std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred P1;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// The box at (column col, row row) of `map` into dst, counted on bar.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap& map, int col, int row, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(col), "r"(row), "r"(smem_addr(bar))
      : "memory");
}
#endif

}  // namespace tandem::kernels::cuda
