// RMSNorm, the first op of the kernel layer: one interface, a CPU reference and a CUDA back end.
//   y[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * w[i]
#pragma once
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// CPU reference (fp32 in and out, fp64 accumulation): the definition every back end is checked against.
void rmsnorm_cpu(const float* x, const float* w, float* y, int rows, int n, float eps);

// True when this build has the CUDA back end and a CUDA device is visible.
bool cuda_device_present();

// CUDA back end on host buffers (copies in and out); Ok, or what failed (the CUDA call, file and
// line). In a build without CUDA it says so.
Status rmsnorm_cuda(const float* x, const float* w, float* y, int rows, int n, float eps);

// Fused residual add, as every decoder layer after the first does it:
//   x[r] += residual[r];  y[r] = rmsnorm(x[r]) * w
// CPU reference: x is updated in place (the new residual stream); when `bf16` is set the sum is
// rounded to bf16 before it is stored and normalised, and y is rounded to bf16 (what the bf16
// GPU path stores). Accumulation in fp64.
void rmsnorm_residual_cpu(float* x, const float* residual, const float* w, float* y, int rows, int n, float eps,
                          bool bf16 = false);

// CUDA back end on device buffers of type `t` (f32 or bf16; w has the same type), enqueued on
// `stream`. One block per row, fp32 arithmetic. Returns Ok or what was wrong (bad type, launch).
Status rmsnorm_residual_cuda(DType t, void* x, const void* residual, const void* w, void* y, int rows, int n,
                                  float eps, Stream stream = nullptr);

}  // namespace tandem::kernels
