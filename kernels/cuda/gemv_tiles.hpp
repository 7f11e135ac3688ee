// The tiled form of the decode-sized product (gemv_tiles.cu), for launches of many x rows (a
// verification's 8 rows a sequence): the same bits as gemv_kernel for every row. gemv_cuda
// (gemv.cu) picks it; nothing else calls it.
#pragma once
#include <cuda_runtime.h>

#include "tandem/kernels/gemv.hpp"

namespace tandem::kernels {

// Whether the tiled kernel takes these operands (beyond gemv_fits): bf16 x; an fp32 or bf16 result
// (bf16 with silu_mul); when grouped, out a multiple of 4, so a warp's rows share a group.
bool gemv_tiles_fit(const GemvArgs& a);
// How many times a launch reads the weights (once a tile of 8 x rows).
long gemv_tiles_reads(const GemvArgs& a);
cudaError_t gemv_tiles_launch(const GemvArgs& a, Stream stream);

}  // namespace tandem::kernels
