// The merge of a split-K softmax shared by the paged attention kernels (paged_attention.cu,
// paged_attention_mla.cu): a row's keys are cut into splits, each split writes a partial row of
// v_dim + 2 floats (m_s: its largest score, l_s: its sum of e^(score - m_s), o_s[v_dim]: its
// e^(score - m_s)-weighted values), and the merge is out = sum_s o_s w_s / sum_s l_s w_s with
// w_s = e^(m_s - M), M = max_s m_s.
#pragma once
#include "common.cuh"

namespace tandem::kernels::cuda {

// Splits per row at most: the merge keeps one weight per split in shared memory.
constexpr int kMaxSplits = 1024;

// Fills weight[s] = w_s (0 for a split without keys, m_s = -inf) for the row whose partials start
// at pr and returns sum_s l_s w_s to every thread of the block; it ends with the weights visible
// to the whole block (block_sum's barriers). scratch: 32 floats of shared memory.
__device__ __forceinline__ float split_weights(const float* pr, int splits, int v_dim, float* weight, float* scratch) {
  const long stride = v_dim + 2;
  float big = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) big = fmaxf(big, pr[s * stride]);
  big = warp_max(big);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = big;
  __syncthreads();
  big = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) big = fmaxf(big, scratch[w]);
  __syncthreads();
  float denom = 0.f;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    const float ms = pr[s * stride];
    weight[s] = ms == -INFINITY ? 0.f : expf(ms - big);
    denom += pr[s * stride + 1] * weight[s];
  }
  return block_sum(denom, scratch);
}

}  // namespace tandem::kernels::cuda
