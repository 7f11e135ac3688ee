// CPU reference of the hidden-state capture's conversion (capture.hpp, cuda/capture.cu).
#include "tandem/kernels/capture.hpp"

namespace tandem::kernels {

void rows_to_bf16_cpu(const float* x, int width, int rows, std::uint16_t* dst, long ldd) {
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i) dst[r * ldd + i] = bf16_from_float(x[static_cast<long>(r) * width + i]);
}

}  // namespace tandem::kernels
