// The wgmma form of the grouped expert GEMM (grouped_wgmma.cu), launched by grouped_gemm_cuda
// (moe_experts.hpp) for GroupedForm::wgmma and by grouped_gemm_silu_cuda (silu): the same
// arguments, checked there; n is y's outputs (for silu, half of W's rows).
#pragma once
#include <cstdint>

#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

Status grouped_wgmma_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts, const void* w,
                          int n, int k, void* y, long ldy, Stream stream, WgmmaTile tile, bool silu);

}  // namespace tandem::kernels
