// CPU references of the decoder's glue kernels (glue.hpp, cuda/glue.cu).
#include <cmath>

#include "tandem/kernels/glue.hpp"

namespace tandem::kernels {

namespace {


// 1 / sqrt(mean(x[0:n]^2) + eps), summed in fp64.
double rms_scale(const float* x, int n, float eps) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return 1.0 / std::sqrt(s / n + eps);
}

}  // namespace

void rmsnorm_rows_cpu(const float* x, long ldx, int rows, int n, const float* w, float* y, long ldy, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const double scale = rms_scale(xr, n, eps);  // before the writes: y may be x
    for (int i = 0; i < n; ++i) yr[i] = round_bf16(static_cast<float>(xr[i] * scale * w[i]));
  }
}

void add_rmsnorm_cpu(float* x, const float* delta, const float* w, float* y, int rows, int n, float eps, float* y32) {
  for (int r = 0; r < rows; ++r) {
    float* xr = x + static_cast<long>(r) * n;
    const float* dr = delta + static_cast<long>(r) * n;
    for (int i = 0; i < n; ++i) xr[i] += dr[i];  // fp32 adds, as the kernel's
    const double scale = rms_scale(xr, n, eps);
    for (int i = 0; i < n; ++i) {
      const float v = static_cast<float>(xr[i] * scale * w[i]);
      y[static_cast<long>(r) * n + i] = round_bf16(v);
      if (y32) y32[static_cast<long>(r) * n + i] = v;
    }
  }
}

void latent_cache_write_cpu(const float* src, long ld, int tokens, int width, const std::int32_t* token_seq,
                            const std::int32_t* token_pos, const std::int32_t* block_tables, int max_blocks,
                            int block_size, float* cache) {
  for (int t = 0; t < tokens; ++t) {
    const int pos = token_pos[t];
    const long slot =
        static_cast<long>(block_tables[static_cast<long>(token_seq[t]) * max_blocks + pos / block_size]) * block_size +
        pos % block_size;
    for (int i = 0; i < width; ++i) cache[slot * width + i] = round_bf16(src[t * ld + i]);
  }
}

void latent_gather_cpu(const float* cache, const std::int32_t* block_table, int block_size, int first, int n, int width, float* dst) {
  for (int j = 0; j < n; ++j) {
    const int row = first + j;
    const long slot = static_cast<long>(block_table[row / block_size]) * block_size + row % block_size;
    for (int i = 0; i < width; ++i) dst[static_cast<long>(j) * width + i] = cache[slot * width + i];
  }
}

float latent_amax_cpu(const float* src, long ld, int tokens, int width, float amax) {
  for (int t = 0; t < tokens; ++t)
    for (int i = 0; i < width; ++i) amax = std::fmax(amax, std::fabs(src[t * ld + i]));
  return amax;
}

void add_f32_cpu(float* y, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void gather_rows_cpu(const float* src, int width, const std::int32_t* rows, int n, float* dst) {
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < width; ++i) dst[static_cast<long>(r) * width + i] = src[static_cast<long>(rows[r]) * width + i];
}

}  // namespace tandem::kernels
