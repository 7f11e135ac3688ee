// Gated activations of the feed-forward blocks.
//   swiglu: y[i] = silu(gate[i]) * up[i],  silu(g) = g / (1 + exp(-g))
#pragma once
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// CPU reference; y may alias gate or up.
void swiglu_cpu(const float* gate, const float* up, float* y, long n);
// glm5_next's clamped form: gate clamped to <= limit and up to [-limit, limit] (in place) first;
// limit infinity: swiglu_cpu. y may alias gate or up.
void clamped_swiglu_cpu(float* gate, float* up, float* y, long n, float limit);

// Logistic sigmoid, elementwise; y may alias x. (The MoE router scores experts with it.)
void sigmoid_cpu(const float* x, float* y, long n);

// SiLU-and-mul on the fused gate_up projection (vLLM's layout): row r of gate_up is
// [gate (d) | up (d)], row r of y is swiglu(gate, up) (d). `bf16`: y rounded to bf16.
void silu_and_mul_cpu(const float* gate_up, float* y, int rows, int d, bool bf16 = false);

// CUDA back end on device buffers of type `t` (f32 or bf16), fp32 arithmetic.
Status silu_and_mul_cuda(DType t, const void* gate_up, void* y, int rows, int d, Stream stream = nullptr);

}  // namespace tandem::kernels
