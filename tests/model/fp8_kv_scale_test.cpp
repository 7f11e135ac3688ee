// The fp8_e4m3 KV pool's calculated scale (cuda_model.hpp: fp8_kv_scale_from_amax), on the CPU with
// the exact e4m3 rounding the GPU uses (kernels/dtype.hpp): rows stored at the calculated scale keep
// e4m3's 3-bit precision over three decades below their amax, with headroom above it; at scale 1
// the small rows the fixtures' latents are made of fall into the subnormals and lose it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tandem/kernels/dtype.hpp"
#include "tandem/model/cuda_model.hpp"

using tandem::kernels::round_fp8_e4m3;
using tandem::model::fp8_kv_scale_from_amax;

namespace {

// Worst relative error of x -> fp8(x / scale) * scale over values log-spread in [lo, hi].
double worst_round_trip(float lo, float hi, float scale) {
  double worst = 0;
  for (int i = 0; i <= 300; ++i) {
    const float x = lo * std::pow(hi / lo, static_cast<float>(i) / 300.f);
    for (float v : {x, -x}) {
      const float back = round_fp8_e4m3(v / scale) * scale;
      worst = std::max(worst, std::fabs(static_cast<double>(back - v)) / std::fabs(static_cast<double>(v)));
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("a calculated fp8 KV scale puts the amax at 200 and falls back to 1 without a measurement") {
  CHECK(fp8_kv_scale_from_amax(400.f) == doctest::Approx(2.0));
  CHECK(fp8_kv_scale_from_amax(0.05f) == doctest::Approx(0.05 / 200));
  CHECK(fp8_kv_scale_from_amax(0.f) == 1.f);
  CHECK(fp8_kv_scale_from_amax(std::numeric_limits<float>::infinity()) == 1.f);
  CHECK(fp8_kv_scale_from_amax(std::numeric_limits<float>::quiet_NaN()) == 1.f);
}

TEST_CASE("rows stored at the calculated scale keep e4m3's precision; at scale 1 small rows do not") {
  const float half_ulp = 1.f / 16;  // 3 mantissa bits, round to nearest
  for (float amax : {0.05f, 1.f, 30.f, 5000.f}) {
    const float scale = fp8_kv_scale_from_amax(amax);
    CAPTURE(amax);
    CHECK(worst_round_trip(amax * 1e-3f, amax, scale) <= half_ulp * 1.0001);
    // Headroom: later rows up to 2.2x the first step's amax are not clipped.
    CHECK(std::fabs(round_fp8_e4m3(2.2f * amax / scale) * scale - 2.2f * amax) <= half_ulp * 2.2f * amax);
  }
  // Latents of a few hundredths (the fixtures'): at scale 1 they sit below e4m3's smallest normal
  // (2^-6), where the step between neighbours is 2^-9 whatever the value.
  CHECK(worst_round_trip(0.05f * 1e-2f, 0.05f, 1.f) > 0.25);
}
