// The hidden-state capture of a step for a drafter on the same device (CudaModel::set_capture):
// the fp32 residual stream of some layer, rounded to bf16, into its columns of the capture buffer.
// nvcc compiles this header as C++17: plain types only.
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

// dst[r * ldd + i] = bf16(x[r * width + i]) for r < rows, i < width. Device buffers.
Status rows_to_bf16(const float* x, int width, int rows, std::uint16_t* dst, long ldd, Stream stream);
// CPU reference (kernels/cpu/capture.cpp): the same bf16 bit patterns.
void rows_to_bf16_cpu(const float* x, int width, int rows, std::uint16_t* dst, long ldd);

}  // namespace tandem::kernels
