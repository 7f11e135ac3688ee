// Element types of activations and of the KV cache, and their exact CPU conversions.
// The CPU references round through these so that they see the very numbers the GPU stores:
//   bf16:     the top 16 bits of an fp32, round to nearest even (as __float2bfloat16)
//   fp8_e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinity, largest finite 448,
//             round to nearest even, saturating to +-448 (as __nv_cvt_float_to_fp8 with SATFINITE)
// An fp8 cache stores x / scale and reads back fp8(x / scale) * scale (one scale per tensor).
#pragma once
#include <cstdint>

namespace tandem::kernels {

enum class DType { f32, bf16, fp8_e4m3 };

const char* dtype_name(DType t);
int dtype_bytes(DType t);

std::uint16_t bf16_from_float(float x);
float bf16_to_float(std::uint16_t b);
inline float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

std::uint8_t fp8_e4m3_from_float(float x);
float fp8_e4m3_to_float(std::uint8_t b);
inline float round_fp8_e4m3(float x) { return fp8_e4m3_to_float(fp8_e4m3_from_float(x)); }
// Element i of a buffer of type t as a float (fp8: its value times scale), and x stored there
// (fp8: x / scale): how the CPU references and the checks read and write a typed cache, with the
// conversions above (the GPU's cuda::load_scaled / store_scaled do the same).
float load_element(DType t, const void* p, long i, float scale = 1.f);
void store_element(DType t, void* p, long i, float x, float scale = 1.f);
// What a cache of `t` reads back after storing x (fp8: one scale per tensor, as above).
inline float round_to(DType t, float x, float scale = 1.f) {
  return t == DType::bf16 ? round_bf16(x) : t == DType::fp8_e4m3 ? round_fp8_e4m3(x / scale) * scale : x;
}

}  // namespace tandem::kernels

// The CUDA entry points take a stream; this names its type without pulling in the CUDA headers.
struct CUstream_st;
namespace tandem::kernels {
using Stream = CUstream_st*;  // cudaStream_t; nullptr is the default stream
}  // namespace tandem::kernels
