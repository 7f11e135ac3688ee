// Hopper's warpgroup MMA (wgmma: PTX ISA 9.7.15), for kernels built for the sm_90a target only:
// the shared-memory matrix descriptor of the 128-byte swizzled layout, the fences around the
// asynchronous products, and the two bf16 forms of m64n64k16 the flash kernels use. Four warps
// (a warpgroup, threads 128 w .. 128 w + 127) issue each together; warp i of the group holds rows
// 16 i .. 16 i + 15 of the 64 x 64 fp32 result in mma.sync's accumulator layout (d[n]: columns
// 8 n + 2 t, + 1 of rows g and g + 8, lane 4 g + t), and a register A operand is mma.sync's
// m16n8k16 A fragment of the same rows.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common.cuh"

namespace tandem::kernels::cuda {

// Tiles for wgmma live in shared memory as slabs of 64 bf16 columns: slab k of a `rows`-row tile
// holds columns 64 k .. 64 k + 63 of every row, 128 bytes a row, its eight 16-byte units XOR-
// swizzled by the row (u ^ r % 8), the hardware's 128-byte swizzle when the tile starts on 1024
// bytes. The element offset of (r, c):
__device__ __forceinline__ int sw128(int r, int c, int rows) {
  return (c / 64) * rows * 64 + r * 64 + ((((c % 64) / 8) ^ (r % 8)) * 8) + c % 8;
}

// The descriptor of a matrix in that layout starting at p (a slab's row that is a multiple of 8,
// plus a k offset inside the 128-byte row): 8-row groups 1024 bytes apart (the stride offset),
// and `lead` bytes between 64-column slabs (used where the matrix is N-major and wider than 64).
__device__ __forceinline__ std::uint64_t sw128_desc(const void* p, unsigned lead) {
  const std::uint64_t addr = smem_addr(p);
  return ((addr & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>((lead & 0x3FFFF) >> 4) << 16) | (static_cast<std::uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}

// Whether this build has the sm_90a code (TANDEM_WGMMA: kernels/CMakeLists.txt) and the current
// device runs it (sm_90 exactly) with `smem` bytes of shared memory a block.
inline bool wgmma_device(size_t smem) {
#if defined(TANDEM_WGMMA)
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return false;
  return major == 9 && minor == 0 && static_cast<size_t>(smem_optin()) >= smem;
#else
  (void)smem;
  return false;
#endif
}

// Shared memory written by the threads (cp.async included) is read by wgmma through the async
// proxy: each writer fences before the barrier that publishes it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Before a batch of products: orders the registers they read and accumulate after their writes.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// After the wait: no read of the accumulators may move above it.
template <int R>
__device__ __forceinline__ void wgmma_settle(float (&d)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

// The 32 fp32 accumulators of a 64 x 64 result (d[n][e], a thread's share) as asm operands %0..%31.
#define TANDEM_WGMMA_D64_ROW(d, n) "+f"(d[n][0]), "+f"(d[n][1]), "+f"(d[n][2]), "+f"(d[n][3])
#define TANDEM_WGMMA_D64(d)                                                                                                    \
  TANDEM_WGMMA_D64_ROW(d, 0), TANDEM_WGMMA_D64_ROW(d, 1), TANDEM_WGMMA_D64_ROW(d, 2), TANDEM_WGMMA_D64_ROW(d, 3),              \
      TANDEM_WGMMA_D64_ROW(d, 4), TANDEM_WGMMA_D64_ROW(d, 5), TANDEM_WGMMA_D64_ROW(d, 6), TANDEM_WGMMA_D64_ROW(d, 7)

// d (+)= A B, A (64 x 16) and B (16 x 64, K-major: stored as B^T's rows) both from shared memory.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], std::uint64_t a, std::uint64_t b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : TANDEM_WGMMA_D64(d)
               : "l"(a), "l"(b), "r"(accumulate));
}

// d += A B, A from registers (a warp's m16n8k16 A fragment), B (16 x 64) N-major in shared memory:
// B's rows (the k index) are the tile's rows, as attention's values are stored.
__device__ __forceinline__ void wgmma_m64n64k16_rs_nmajor(float (&d)[8][4], const unsigned (&a)[4], std::uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : TANDEM_WGMMA_D64(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
#endif

}  // namespace tandem::kernels::cuda
