// What the two flash prefill kernels (mla_prefill_flash.cu: absorbed MLA; mla_prefill_mha.cu:
// un-absorbed) share: the per-thread online-softmax state of a warp's 16 query rows, the scores'
// masking and row maxima in mma.sync's accumulator layout, and the launch-side checks.
#pragma once
#include <cstdint>

#include "common.cuh"

namespace tandem::kernels::cuda {

// Per-thread state of a warp's 16 rows: lane 4 g + t keeps rows g and g + 8.
struct FlashSoftmax {
  float m[2] = {-INFINITY, -INFINITY};  // running max (exp2 domain)
  float l[2] = {0.f, 0.f};              // this thread's share of the running sum
};

// Scores s[n] of keys key0 + 8 n .. + 7 (lane 4 g + t: rows g, g + 8 at keys 2t, 2t + 1): a key
// past its row's last (lim) becomes -inf, the others are scaled into the exp2 domain; mx gets
// each row's maximum over the row's four lanes.
template <int N>
__device__ __forceinline__ void flash_mask_max(float (&s)[N][4], int key0, const int (&lim)[2], float scale_log2, float (&mx)[2]) {
  const int t = threadIdx.x % 4;
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = key0 + 8 * n + 2 * t + (e % 2), h = e / 2;
      s[n][e] = j <= lim[h] ? s[n][e] * scale_log2 : -INFINITY;
      mx[h] = fmaxf(mx[h], s[n][e]);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace tandem::kernels::cuda
