#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common.cuh"
#include "tandem/kernels/gqa.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;

// Block (t, h): one warp normalises head h of token t (a head is a few hundred entries at most).
__global__ void head_rmsnorm_kernel(bf16* x, long ld, int q_heads, int dim, const bf16* q_w, const bf16* k_w, float eps) {
  const int h = blockIdx.y;
  bf16* row = x + blockIdx.x * ld + static_cast<long>(h) * dim;
  const bf16* w = h < q_heads ? q_w : k_w;
  float s = 0.f;
  for (int i = threadIdx.x; i < dim; i += 32) {
    const float v = __bfloat162float(row[i]);
    s += v * v;
  }
  s = cuda::warp_sum(s);
  const float r = rsqrtf(s / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += 32) row[i] = __float2bfloat16_rn(__bfloat162float(row[i]) * r * __bfloat162float(w[i]));
}

}  // namespace

Status head_rmsnorm(void* x, long ld, int tokens, int q_heads, int k_heads, int head_dim, const void* q_w,
                         const void* k_w, float eps, Stream stream) {
  if (tokens < 0 || q_heads <= 0 || k_heads <= 0 || head_dim <= 0 || q_heads + k_heads > 65535)
    return Error{"head_rmsnorm: tokens >= 0, heads in (0, 65535] and head_dim > 0"};
  if (tokens == 0) return {};
  head_rmsnorm_kernel<<<dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(q_heads + k_heads)), 32, 0,
                        static_cast<cudaStream_t>(stream)>>>(static_cast<bf16*>(x), ld, q_heads, head_dim,
                                                             static_cast<const bf16*>(q_w), static_cast<const bf16*>(k_w), eps);
  return TANDEM_CUDA_LAUNCHED("head_rmsnorm");
}

}  // namespace tandem::kernels
