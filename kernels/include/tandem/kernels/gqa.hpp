// What glm4_moe's grouped-query attention needs on CUDA beyond the op layer and tandem/kernels/glue.hpp:
// the per-head RMSNorm of its queries and keys (use_qk_norm), in place in the fused projection's
// rows. bf16; device buffers. nvcc compiles this header as C++17: plain types only.
#pragma once
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// For each token t (rows at stride ld) the q_heads + k_heads adjacent heads of head_dim entries
// from x + t * ld: head h <- rmsnorm(head h) * (h < q_heads ? q_w : k_w), sums in fp32.
Status head_rmsnorm(void* x, long ld, int tokens, int q_heads, int k_heads, int head_dim, const void* q_w,
                         const void* k_w, float eps, Stream stream);
// CPU reference (kernels/cpu/gqa.cpp): fp32 buffers of bf16 values, fp64 sums, rounded to bf16.
void head_rmsnorm_cpu(float* x, long ld, int tokens, int q_heads, int k_heads, int head_dim, const float* q_w,
                      const float* k_w, float eps);

}  // namespace tandem::kernels
