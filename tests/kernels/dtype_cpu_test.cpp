// bf16 and fp8_e4m3 conversions: the CPU references round through these, so they must round
// exactly as the GPU does (nearest, ties to even; fp8 saturates to +-448). The GPU check compares
// them with CUDA's own conversions over many values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "tandem/kernels/dtype.hpp"

using namespace tandem::kernels;

TEST_CASE("bf16: the top half of an fp32, round to nearest even") {
  CHECK(bf16_from_float(1.0f) == 0x3F80);
  CHECK(bf16_from_float(-2.0f) == 0xC000);
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(round_bf16(1.0f + 0x1p-8f) == 1.0f);                  // halfway: to the even neighbour (down)
  CHECK(round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);    // halfway: to the even neighbour (up)
  CHECK(round_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);  // past halfway: up
  CHECK(std::isnan(round_bf16(std::nanf(""))));
  CHECK(std::isinf(round_bf16(INFINITY)));
  for (std::uint32_t b = 0; b < 0x7F80; b += 7) CHECK(bf16_from_float(bf16_to_float(static_cast<std::uint16_t>(b))) == b);
}

TEST_CASE("fp8_e4m3: known codes, subnormals, saturation, NaN") {
  CHECK(fp8_e4m3_from_float(0.0f) == 0x00);
  CHECK(fp8_e4m3_from_float(1.0f) == 0x38);
  CHECK(fp8_e4m3_from_float(-2.0f) == 0xC0);
  CHECK(fp8_e4m3_from_float(448.0f) == 0x7E);
  CHECK(fp8_e4m3_from_float(1000.0f) == 0x7E);   // saturates rather than overflowing
  CHECK(fp8_e4m3_from_float(-1e30f) == 0xFE);
  CHECK(fp8_e4m3_from_float(0x1p-9f) == 0x01);   // the smallest subnormal
  CHECK(fp8_e4m3_from_float(0x1p-10f) == 0x00);  // half of it: ties to even, to zero
  CHECK(fp8_e4m3_from_float(3 * 0x1p-10f) == 0x02);
  CHECK(fp8_e4m3_from_float(0x1p-6f) == 0x08);   // the smallest normal
  CHECK(fp8_e4m3_from_float(std::nanf("")) == 0x7F);
  CHECK(fp8_e4m3_to_float(0x7E) == 448.0f);
  CHECK(fp8_e4m3_to_float(0x01) == 0x1p-9f);
  CHECK(std::isnan(fp8_e4m3_to_float(0x7F)));
  CHECK(std::isnan(fp8_e4m3_to_float(0xFF)));
}

TEST_CASE("fp8_e4m3: every code round-trips; midpoints go to the even code; values are monotonic") {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    CHECK(fp8_e4m3_from_float(fp8_e4m3_to_float(static_cast<std::uint8_t>(c))) == c);
  }
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = fp8_e4m3_to_float(static_cast<std::uint8_t>(c)), hi = fp8_e4m3_to_float(static_cast<std::uint8_t>(c + 1));
    CHECK(lo < hi);
    const float mid = (lo + hi) / 2;  // exact in fp32
    CHECK(fp8_e4m3_from_float(mid) == (c % 2 == 0 ? c : c + 1));
    CHECK(fp8_e4m3_from_float(std::nextafter(mid, 0.f)) == c);
    CHECK(fp8_e4m3_from_float(std::nextafter(mid, 1e9f)) == c + 1);
  }
}
