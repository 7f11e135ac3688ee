#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common.cuh"
#include "tandem/kernels/capture.hpp"

namespace tandem::kernels {
namespace {

__global__ void rows_to_bf16_kernel(const float* x, int width, __nv_bfloat16* dst, long ldd) {
  const float* xr = x + static_cast<long>(blockIdx.x) * width;
  __nv_bfloat16* d = dst + static_cast<long>(blockIdx.x) * ldd;
  for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = __float2bfloat16_rn(xr[i]);
}

}  // namespace

Status rows_to_bf16(const float* x, int width, int rows, std::uint16_t* dst, long ldd, Stream stream) {
  if (rows <= 0) return {};
  rows_to_bf16_kernel<<<rows, 256, 0, stream>>>(x, width, reinterpret_cast<__nv_bfloat16*>(dst), ldd);
  return TANDEM_CUDA_LAUNCHED("hidden-state capture");
}

}  // namespace tandem::kernels
