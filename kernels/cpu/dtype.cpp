#include "tandem/kernels/dtype.hpp"

#include <cmath>
#include <cstring>

namespace tandem::kernels {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp8_e4m3: return "fp8_e4m3";
  }
  return "?";
}

int dtype_bytes(DType t) { return t == DType::f32 ? 4 : t == DType::bf16 ? 2 : 1; }

std::uint16_t bf16_from_float(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stays a NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// On the float's bits (4x faster than through frexp/ldexp in double, which the checkpoint writers
// feel: tens of G values a run); equal to that form for every one of the 2^32 floats (checked
// once, exhaustively) and to the GPU's conversion (gpu_check's fp8 rows).
std::uint8_t fp8_e4m3_from_float(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint8_t sign = (u >> 24) & 0x80;
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return 0x7F;               // NaN
  if (u >= 0x43E00000u) return sign | 0x7E;       // >= 448 (and inf): saturate (448 itself is 0x7E)
  const int exp = static_cast<int>(u >> 23) - 127;
  if (exp < -6) {  // subnormal (and 0): multiples of 2^-9, ties to even; rounding up to 8 is the smallest normal
    float a;
    std::memcpy(&a, &u, 4);
    return sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.f));
  }
  // 3 of the 23 mantissa bits, rounded to nearest, ties to even; a carry into the exponent is the
  // next binade's 1.0 (the field arithmetic does it).
  const std::uint32_t m = u & 0x7FFFFFu, rest = m & 0xFFFFFu, half = 0x80000u;
  std::uint32_t code = (static_cast<std::uint32_t>(exp + 7) << 3) | (m >> 20);
  if (rest > half || (rest == half && (code & 1u))) ++code;
  if (code >= 0x7F) return sign | 0x7E;  // rounds past 448: saturate
  return sign | static_cast<std::uint8_t>(code);
}

float fp8_e4m3_to_float(std::uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float sign = (b & 0x80) ? -1.f : 1.f;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.f + static_cast<float>(m) / 8.f, e - 7);
}

float load_element(DType t, const void* p, long i, float scale) {
  switch (t) {
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::fp8_e4m3: return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(p)[i]) * scale;
    case DType::f32: break;
  }
  return static_cast<const float*>(p)[i];
}

void store_element(DType t, void* p, long i, float x, float scale) {
  switch (t) {
    case DType::bf16: static_cast<std::uint16_t*>(p)[i] = bf16_from_float(x); return;
    case DType::fp8_e4m3: static_cast<std::uint8_t*>(p)[i] = fp8_e4m3_from_float(x / scale); return;
    case DType::f32: static_cast<float*>(p)[i] = x; return;
  }
}

}  // namespace tandem::kernels
