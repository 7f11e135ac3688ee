#include <cstdint>

#include "rows_gemv.cuh"
#include "tandem/kernels/skinny_gemm.hpp"

namespace tandem::kernels {

bool skinny_gemm_fits(const void* x, long ldx, const void* w, int in) {
  return in % 8 == 0 && ldx % 8 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(w) % 16 == 0;
}

Status skinny_gemm_cuda(const void* x, long ldx, int rows, const void* w, int in, int out, const void* bias, void* y,
                             long ldy, DType y_type, Stream stream) {
  if (rows < 0 || in <= 0 || out <= 0) return Error{"skinny_gemm: bad shape"};
  if (!skinny_gemm_fits(x, ldx, w, in)) return Error{"skinny_gemm: in and ldx must be multiples of 8, x and w 16-byte aligned"};
  if (rows == 0) return {};
  const dim3 grid(static_cast<unsigned>((out + gemv::kRowsPerBlock - 1) / gemv::kRowsPerBlock), 1);
  return cuda::with_act_type(y_type, "skinny_gemm", [&](auto tag) {
    using T = decltype(tag);
    gemv::rows_gemv_kernel<T><<<grid, gemv::kWarps * 32, 0, stream>>>(
        static_cast<const cuda::bf16*>(x), ldx, nullptr, nullptr, rows, static_cast<const cuda::bf16*>(w), out, in,
        static_cast<const cuda::bf16*>(bias), static_cast<T*>(y), ldy);
    return TANDEM_CUDA_LAUNCHED("rows_gemv_kernel");
  });
}

}  // namespace tandem::kernels
