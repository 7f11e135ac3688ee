#include "tandem/kernels/paged_attention.hpp"

namespace tandem::kernels {

float kv_roundtrip_cpu(DType kv, float x, float scale) {
  if (kv == DType::fp8_e4m3) return round_fp8_e4m3(x / scale) * scale;  // fp32 divide and multiply, as on the GPU
  if (kv == DType::bf16) return round_bf16(x);
  return x;
}

}  // namespace tandem::kernels
