// y[r][o] = sum_i x[r][i] * w[o][i] (+ bias[o]) for a few rows (decode batches), bf16 operands,
// fp32 sums, y bf16 or fp32: the weight is streamed once from memory over every multiprocessor.
// The model uses it below a row threshold and cuBLASLt (gemm.hpp) above it. CPU reference:
// linear_cpu. Needs in % 8 == 0, ldx % 8 == 0 and 16-byte aligned x and w.
#pragma once
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// Whether skinny_gemm_cuda takes these operands (shape and alignment).
bool skinny_gemm_fits(const void* x, long ldx, const void* w, int in);

Status skinny_gemm_cuda(const void* x, long ldx, int rows, const void* w, int in, int out, const void* bias, void* y,
                             long ldy, DType y_type, Stream stream = nullptr);

}  // namespace tandem::kernels
