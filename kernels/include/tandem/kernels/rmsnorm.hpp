// RMSNorm, the first op of the kernel layer: one interface, a CPU reference and a CUDA back end.
//   y[r][i] = x[r][i] / sqrt(mean_i(x[r][i]^2) + eps) * w[i]
#pragma once
#include <string>

namespace tandem::kernels {

// CPU reference (fp32 in and out, fp64 accumulation): the definition every back end is checked against.
void rmsnorm_cpu(const float* x, const float* w, float* y, int rows, int n, float eps);

// True when this build has the CUDA back end and a CUDA device is visible.
bool cuda_device_present();

// CUDA back end on host buffers (copies in and out); returns an empty string on success,
// otherwise what failed. In a build without CUDA it says so.
std::string rmsnorm_cuda(const float* x, const float* w, float* y, int rows, int n, float eps);

}  // namespace tandem::kernels
