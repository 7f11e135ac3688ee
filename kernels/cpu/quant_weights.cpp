#include "tandem/kernels/quant_weights.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/quant_gemv.hpp"

namespace tandem::kernels {
namespace {

constexpr float kE2m1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};

size_t idx(long n) { return static_cast<size_t>(n); }

}  // namespace

float e2m1_to_float(std::uint8_t nibble) {
  const float v = kE2m1[nibble & 7];
  return (nibble & 8) ? -v : v;
}

std::uint8_t e2m1_from_float(float x) {
  const std::uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::isnan(x) ? 0.f : std::fabs(x);
  // The nearest code by the midpoints of kE2m1, a tie going to the even code (mantissa bit 0):
  // 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4. Past 5, 6 unless
  // a - 4 and a - 6 round to the same float (a >= 2^25, an infinity): then 4, the even code of the
  // tie, as the nearest-code search this replaces chose (equal for all 2^32 floats).
  std::uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.f) c = 6;
  else c = a - 6.f < a - 4.f ? 7 : 6;
  return static_cast<std::uint8_t>(sign | c);
}

// quant_gemv.hpp's stack layout (host arithmetic: the CPU reference uses it too).
std::size_t quant_data_bytes(QuantFormat f, int rows, int in) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(in);
  return f == QuantFormat::fp8_block ? n : n / 2;
}

std::size_t quant_scale_bytes(QuantFormat f, int rows, int in) {
  if (f == QuantFormat::nvfp4) return static_cast<std::size_t>(rows) * static_cast<std::size_t>(in / kNvfp4Group);
  const std::size_t br = static_cast<std::size_t>((rows + kFp8Block - 1) / kFp8Block);
  return br * static_cast<std::size_t>((in + kFp8Block - 1) / kFp8Block) * 4;
}

void dequant_fp8_block_cpu(const std::uint8_t* w, const float* scale_inv, int out, int in, float* y) {
  const int bcols = (in + kFp8Block - 1) / kFp8Block;
  for (long o = 0; o < out; ++o)
    for (long i = 0; i < in; ++i)
      y[idx(o * in + i)] = fp8_e4m3_to_float(w[idx(o * in + i)]) * scale_inv[idx((o / kFp8Block) * bcols + i / kFp8Block)];
}

void dequant_nvfp4_cpu(const std::uint8_t* packed, const std::uint8_t* scales, float global_scale, int out, int in,
                       float* y) {
  const long groups = in / kNvfp4Group;
  for (long o = 0; o < out; ++o)
    for (long i = 0; i < in; ++i) {
      const std::uint8_t byte = packed[idx(o * (in / 2) + i / 2)];
      const std::uint8_t nibble = (i & 1) ? static_cast<std::uint8_t>(byte >> 4) : static_cast<std::uint8_t>(byte & 0xF);
      y[idx(o * in + i)] = e2m1_to_float(nibble) * (fp8_e4m3_to_float(scales[idx(o * groups + i / kNvfp4Group)]) * global_scale);
    }
}

void quantize_fp8_block_cpu(const float* w, int out, int in, std::uint8_t* q, float* scale_inv) {
  const int brows = (out + kFp8Block - 1) / kFp8Block, bcols = (in + kFp8Block - 1) / kFp8Block;
  for (int br = 0; br < brows; ++br)
    for (int bc = 0; bc < bcols; ++bc) {
      const int o_end = std::min(out, (br + 1) * kFp8Block), i_end = std::min(in, (bc + 1) * kFp8Block);
      float amax = 0;
      for (long o = br * kFp8Block; o < o_end; ++o)
        for (long i = bc * kFp8Block; i < i_end; ++i) amax = std::max(amax, std::fabs(w[idx(o * in + i)]));
      const float s = amax > 0 ? amax / 448.f : 1.f;
      scale_inv[idx(br * bcols + bc)] = s;
      for (long o = br * kFp8Block; o < o_end; ++o)
        for (long i = bc * kFp8Block; i < i_end; ++i) q[idx(o * in + i)] = fp8_e4m3_from_float(w[idx(o * in + i)] / s);
    }
}

void quantize_nvfp4_cpu(const float* w, int out, int in, std::uint8_t* packed, std::uint8_t* scales,
                        float* global_scale) {
  float amax = 0;
  for (long k = 0; k < long(out) * in; ++k) amax = std::max(amax, std::fabs(w[idx(k)]));
  const float g = amax > 0 ? amax / (6.f * 448.f) : 1.f;
  *global_scale = g;
  const long groups = in / kNvfp4Group;
  for (long o = 0; o < out; ++o)
    for (long grp = 0; grp < groups; ++grp) {
      const float* v = w + o * in + grp * kNvfp4Group;
      float gmax = 0;
      for (int k = 0; k < kNvfp4Group; ++k) gmax = std::max(gmax, std::fabs(v[k]));
      const std::uint8_t s8 = fp8_e4m3_from_float(gmax / 6.f / g);
      scales[idx(o * groups + grp)] = s8;
      const float s = fp8_e4m3_to_float(s8) * g;
      for (int k = 0; k < kNvfp4Group; k += 2) {
        const std::uint8_t lo = e2m1_from_float(s > 0 ? v[k] / s : 0.f), hi = e2m1_from_float(s > 0 ? v[k + 1] / s : 0.f);
        packed[idx(o * (in / 2) + (grp * kNvfp4Group + k) / 2)] = static_cast<std::uint8_t>(lo | (hi << 4));
      }
    }
}

void linear_fp8_block_cpu(const float* x, const std::uint8_t* w, const float* scale_inv, float* y, int rows, int in,
                          int out) {
  std::vector<float> dense(idx(long(out) * in));
  dequant_fp8_block_cpu(w, scale_inv, out, in, dense.data());
  linear_cpu(x, dense.data(), nullptr, y, rows, in, out);
}

void linear_nvfp4_cpu(const float* x, const std::uint8_t* packed, const std::uint8_t* scales, float global_scale,
                      float* y, int rows, int in, int out) {
  std::vector<float> dense(idx(long(out) * in));
  dequant_nvfp4_cpu(packed, scales, global_scale, out, in, dense.data());
  linear_cpu(x, dense.data(), nullptr, y, rows, in, out);
}

}  // namespace tandem::kernels
