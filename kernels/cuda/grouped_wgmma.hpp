// The wgmma form of the grouped expert GEMM (grouped_wgmma.cu), launched by grouped_gemm_cuda
// (moe_experts.hpp) for GroupedForm::wgmma: the same arguments, checked there.
#pragma once
#include <cstdint>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

Status grouped_wgmma_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts, const void* w,
                          int n, int k, void* y, long ldy, Stream stream);

}  // namespace tandem::kernels
