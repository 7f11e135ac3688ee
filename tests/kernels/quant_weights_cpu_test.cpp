// The quantised weight formats as checkpoints store them (quant_weights.hpp): the byte layouts
// are pinned by hand-made bytes (so a reader that swaps nibbles or scale indices fails here, not
// in a model's gibberish), and the quantisers' round trip stays within the formats' precision.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/moe_experts.hpp"
#include "tandem/kernels/quant_weights.hpp"

using namespace tandem::kernels;

namespace {
std::vector<float> random_weights(int out, int in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 0.02f);
  std::vector<float> w(static_cast<size_t>(out) * static_cast<size_t>(in));
  for (auto& v : w) v = d(rng);
  w[7] = 0.5f;  // one outlier, as real layers have
  return w;
}
}  // namespace

TEST_CASE("e2m1: the eight magnitudes, the sign bit, round to nearest with ties to even, saturation") {
  const float mags[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (std::uint8_t c = 0; c < 16; ++c) {
    CHECK(e2m1_to_float(c) == ((c & 8) ? -mags[c & 7] : mags[c & 7]));
    CHECK(e2m1_from_float(e2m1_to_float(c)) == c);
  }
  CHECK(e2m1_from_float(0.25f) == 0);  // halfway 0 / 0.5: the even code
  CHECK(e2m1_from_float(0.75f) == 2);  // halfway 0.5 / 1: 1
  CHECK(e2m1_from_float(2.5f) == 4);   // halfway 2 / 3: 2
  CHECK(e2m1_from_float(5.0f) == 6);   // halfway 4 / 6: 4
  CHECK(e2m1_from_float(5.1f) == 7);
  CHECK(e2m1_from_float(100.f) == 7);  // saturates at 6
  CHECK(e2m1_from_float(-3.2f) == (8 | 5));
  // Either side of every midpoint goes to the nearer code; the midpoint itself to the even one.
  for (int c = 0; c < 7; ++c) {
    const float mid = (mags[c] + mags[c + 1]) / 2;
    CHECK(e2m1_from_float(std::nextafter(mid, 0.f)) == c);
    CHECK(e2m1_from_float(std::nextafter(mid, 100.f)) == c + 1);
    CHECK(e2m1_from_float(mid) == (c % 2 == 0 ? c : c + 1));
  }
}

TEST_CASE("NVFP4 layout: low nibble is the even element, one fp8 scale per 16 inputs, times the global scale") {
  const int out = 2, in = 32;
  std::vector<std::uint8_t> packed(static_cast<size_t>(out * in / 2), 0), scales(static_cast<size_t>(out * in / 16));
  packed[0] = 0x21;                                   // w[0][0] = e2m1 1 (0.5), w[0][1] = e2m1 2 (1.0)
  packed[8] = 0xF7;                                   // w[0][16] = 6, w[0][17] = -6
  packed[16 + 15] = 0x50;                             // w[1][30] = 0, w[1][31] = 3
  scales[0] = fp8_e4m3_from_float(2.f);               // row 0, inputs 0..15
  scales[1] = fp8_e4m3_from_float(0.5f);              // row 0, inputs 16..31
  scales[3] = fp8_e4m3_from_float(4.f);               // row 1, inputs 16..31
  std::vector<float> w(static_cast<size_t>(out * in));
  dequant_nvfp4_cpu(packed.data(), scales.data(), 0.25f, out, in, w.data());
  CHECK(w[0] == 0.5f * 2.f * 0.25f);
  CHECK(w[1] == 1.0f * 2.f * 0.25f);
  CHECK(w[2] == 0.f);
  CHECK(w[16] == 6.f * 0.5f * 0.25f);
  CHECK(w[17] == -6.f * 0.5f * 0.25f);
  CHECK(w[32 + 30] == 0.f);
  CHECK(w[32 + 31] == 3.f * 4.f * 0.25f);
}

TEST_CASE("fp8 block layout: scale_inv[o/128][i/128] multiplies, ragged edge blocks included") {
  const int out = 130, in = 260;  // 2 x 3 scale blocks, the last ones partial
  std::vector<std::uint8_t> q(static_cast<size_t>(out * in), fp8_e4m3_from_float(1.f));
  std::vector<float> s = {1, 2, 3, 4, 5, 6};
  std::vector<float> w(q.size());
  dequant_fp8_block_cpu(q.data(), s.data(), out, in, w.data());
  CHECK(w[0] == 1.f);
  CHECK(w[127] == 1.f);
  CHECK(w[128] == 2.f);
  CHECK(w[259] == 3.f);
  CHECK(w[static_cast<size_t>(128 * in)] == 4.f);
  CHECK(w[static_cast<size_t>(129 * in + 259)] == 6.f);
}

TEST_CASE("fp8 block quantiser: every weight within e4m3's half step of its block scale") {
  const int out = 200, in = 300;
  const auto w = random_weights(out, in, 1);
  std::vector<std::uint8_t> q(w.size());
  std::vector<float> s(2 * 3), back(w.size());
  quantize_fp8_block_cpu(w.data(), out, in, q.data(), s.data());
  dequant_fp8_block_cpu(q.data(), s.data(), out, in, back.data());
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      const size_t k = static_cast<size_t>(o * in + i);
      const float scale = s[static_cast<size_t>((o / 128) * 3 + i / 128)];
      REQUIRE(std::fabs(back[k] - w[k]) <= std::fabs(w[k]) / 16.f + scale * 0x1p-10f);
    }
  CHECK(back[7] == doctest::Approx(0.5f).epsilon(1e-6));  // the block maximum maps to 448 exactly
}

TEST_CASE("NVFP4 quantiser: within half an e2m1 step of each group's scale; the global scale maps the max to 6*448") {
  const int out = 64, in = 256;
  const auto w = random_weights(out, in, 2);
  std::vector<std::uint8_t> packed(w.size() / 2), scales(w.size() / 16);
  float g = 0;
  quantize_nvfp4_cpu(w.data(), out, in, packed.data(), scales.data(), &g);
  CHECK(g == doctest::Approx(0.5f / (6.f * 448.f)));
  std::vector<float> back(w.size());
  dequant_nvfp4_cpu(packed.data(), scales.data(), g, out, in, back.data());
  double err2 = 0, ref2 = 0;
  for (int o = 0; o < out; ++o)
    for (int grp = 0; grp < in / 16; ++grp) {
      const float s = fp8_e4m3_to_float(scales[static_cast<size_t>(o * (in / 16) + grp)]) * g;
      for (int k = 0; k < 16; ++k) {
        const size_t idx = static_cast<size_t>(o * in + grp * 16 + k);
        REQUIRE(std::fabs(back[idx] - w[idx]) <= 1.0f * s + 1e-9f);  // the widest e2m1 step (4 -> 6) is 2
        err2 += double(back[idx] - w[idx]) * (back[idx] - w[idx]);
        ref2 += double(w[idx]) * w[idx];
      }
    }
  CHECK(std::sqrt(err2 / ref2) < 0.15);  // 4-bit weights: about 10% RMS error on Gaussian data
}

TEST_CASE("quantised linear layers equal the dense layer on the dequantised weights") {
  const int rows = 3, in = 256, out = 40;
  const auto w = random_weights(out, in, 3);
  std::vector<float> x(static_cast<size_t>(rows * in));
  for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(static_cast<float>(k));
  std::vector<std::uint8_t> q(w.size()), packed(w.size() / 2), scales(w.size() / 16);
  std::vector<float> s(2 * 2), dense(w.size()), y(static_cast<size_t>(rows * out)), ref(y.size());
  float g = 0;
  quantize_fp8_block_cpu(w.data(), out, in, q.data(), s.data());
  quantize_nvfp4_cpu(w.data(), out, in, packed.data(), scales.data(), &g);
  linear_fp8_block_cpu(x.data(), q.data(), s.data(), y.data(), rows, in, out);
  dequant_fp8_block_cpu(q.data(), s.data(), out, in, dense.data());
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double acc = 0;
      for (int i = 0; i < in; ++i) acc += double(x[static_cast<size_t>(r * in + i)]) * dense[static_cast<size_t>(o * in + i)];
      CHECK(y[static_cast<size_t>(r * out + o)] == doctest::Approx(acc).epsilon(1e-5));
    }
  linear_nvfp4_cpu(x.data(), packed.data(), scales.data(), g, y.data(), rows, in, out);
  dequant_nvfp4_cpu(packed.data(), scales.data(), g, out, in, dense.data());
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double acc = 0;
      for (int i = 0; i < in; ++i) acc += double(x[static_cast<size_t>(r * in + i)]) * dense[static_cast<size_t>(o * in + i)];
      CHECK(y[static_cast<size_t>(r * out + o)] == doctest::Approx(acc).epsilon(1e-5));
    }
}

TEST_CASE("grouped_gemm_quant_cpu: an expert's matrices one under another, pairs gathered, weights rounded to bf16") {
  // Two experts of two fp8 matrices [2][16] each: row 0 all 1.0 (0x38), row 1 all 2.0 (0x40);
  // matrix m's one block scale marks it (the last one's, 1 + 2^-10, rounds away in bf16).
  const int per = 2, rows = 2, k = 16, E = 2;
  std::vector<std::uint8_t> bytes;
  for (int m = 0; m < E * per; ++m)
    for (int o = 0; o < rows; ++o) bytes.insert(bytes.end(), k, o == 0 ? 0x38 : 0x40);
  const std::vector<float> scales = {1.f, 2.f, 4.f, 1.f + 1.f / 1024};
  QuantMatrices w;
  w.format = QuantFormat::fp8_block, w.data = bytes.data(), w.scales = scales.data(), w.count = E * per, w.rows = rows, w.in = k;
  std::vector<float> x;
  for (int r = 0; r < 3; ++r) x.insert(x.end(), k + 2, static_cast<float>(r + 1));  // row r all r + 1; ldx k + 2
  const std::vector<std::int32_t> offsets = {0, 1, 3}, gather = {2, 0, 1};
  const long ldy = per * rows + 1;
  std::vector<float> y(3 * ldy, -1.f);
  grouped_gemm_quant_cpu(x.data(), k + 2, gather.data(), offsets.data(), E, w, y.data(), ldy);
  // y[p][j * rows + o] = k * x(gather[p]) * scale(e * per + j) * (o + 1), the last scale as 1.
  const float want[3][4] = {{48, 96, 96, 192}, {64, 128, 16, 32}, {128, 256, 32, 64}};
  for (int p = 0; p < 3; ++p) {
    for (int c = 0; c < 4; ++c) CHECK(y[static_cast<size_t>(p * ldy + c)] == want[p][c]);
    CHECK(y[static_cast<size_t>(p * ldy + 4)] == -1.f);  // past n: untouched
  }
}
