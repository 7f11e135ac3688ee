#include <cmath>
#include <vector>

#include "tandem/kernels/rope.hpp"

namespace tandem::kernels {

void rope_inv_freq(float* inv_freq, int rot_dim, double theta) {
  for (int i = 0; i < rot_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(exponent)));
  }
}

void rope_cpu(float* x, int heads, int head_stride, int rot_dim, const float* inv_freq, int pos,
              RopeLayout layout) {
  const int half = rot_dim / 2;
  std::vector<float> tmp(static_cast<size_t>(rot_dim));
  for (int h = 0; h < heads; ++h) {
    float* xh = x + static_cast<long>(h) * head_stride;
    for (int i = 0; i < half; ++i) {
      // The angle is formed in fp32 (position times fp32 frequency) like the reference does,
      // so that long positions round the same way.
      const float angle = static_cast<float>(pos) * inv_freq[i];
      const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
      const double a = layout == RopeLayout::half ? xh[i] : xh[2 * i];
      const double b = layout == RopeLayout::half ? xh[i + half] : xh[2 * i + 1];
      tmp[static_cast<size_t>(i)] = static_cast<float>(a * c - b * s);
      tmp[static_cast<size_t>(i + half)] = static_cast<float>(b * c + a * s);
    }
    for (int i = 0; i < rot_dim; ++i) xh[i] = tmp[static_cast<size_t>(i)];
  }
}

}  // namespace tandem::kernels

namespace tandem::kernels {

void rope_tokens_cpu(float* x, int tokens, long token_stride, int heads, int head_stride, int rot_dim,
                     const float* inv_freq, const int* pos, RopeLayout layout, bool bf16) {
  for (int t = 0; t < tokens; ++t) {
    float* xt = x + t * token_stride;
    rope_cpu(xt, heads, head_stride, rot_dim, inv_freq, pos[t], layout);
    if (bf16)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < rot_dim; ++i) xt[h * head_stride + i] = round_bf16(xt[h * head_stride + i]);
  }
}

}  // namespace tandem::kernels
