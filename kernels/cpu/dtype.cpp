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

std::uint8_t fp8_e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;  // saturate (448 itself is 0x7E)
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the leading bit is 2^(e-1)
  const int exp = e - 1;
  if (a == 0.0 || exp < -6) {  // subnormal: multiples of 2^-9; rounding up to 8 is the smallest normal
    return sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0));
  }
  double q = std::nearbyint((std::ldexp(a, -exp) - 1.0) * 8.0);  // 3 mantissa bits, ties to even
  int biased = exp + 7;
  if (q == 8.0) {
    q = 0;
    ++biased;
  }
  if (biased > 15 || (biased == 15 && q == 7.0)) return sign | 0x7E;  // rounds past 448: saturate
  return sign | static_cast<std::uint8_t>((biased << 3) | static_cast<int>(q));
}

float fp8_e4m3_to_float(std::uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const float sign = (b & 0x80) ? -1.f : 1.f;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.f + static_cast<float>(m) / 8.f, e - 7);
}

}  // namespace tandem::kernels
