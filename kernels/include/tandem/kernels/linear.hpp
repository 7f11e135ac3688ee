// Linear layer, the GEMM every projection is made of (PyTorch's nn.Linear layout):
//   y[r][o] = sum_i x[r][i] * w[o][i] + b[o]          w is [out][in], row-major
#pragma once

namespace tandem::kernels {

// CPU reference (fp32 in and out, fp64 accumulation). bias may be null.
void linear_cpu(const float* x, const float* w, const float* bias, float* y, int rows, int in, int out);

}  // namespace tandem::kernels
