// Rotary embedding at per-token positions. One block per (token, head), one thread per pair.
// Every thread reads its pair before any thread writes (a barrier between), because the
// interleaved layout writes pair i to (i, i + half), places other threads read from.
#include "common.cuh"
#include "tandem/kernels/rope.hpp"

namespace tandem::kernels {
namespace {

template <class T>
__global__ void rope_kernel(T* x, long token_stride, int heads, int head_stride, int rot_dim, const float* inv_freq,
                            const int* pos, bool interleaved) {
  const int token = blockIdx.x / heads, head = blockIdx.x % heads, half = rot_dim / 2, i = threadIdx.x;
  T* xh = x + token * token_stride + static_cast<long>(head) * head_stride;
  float a = 0.f, b = 0.f;
  if (i < half) {
    a = cuda::to_float(interleaved ? xh[2 * i] : xh[i]);
    b = cuda::to_float(interleaved ? xh[2 * i + 1] : xh[i + half]);
  }
  __syncthreads();
  if (i >= half) return;
  const float angle = static_cast<float>(pos[token]) * inv_freq[i];  // fp32, as the reference forms it
  double s, c;
  sincos(static_cast<double>(angle), &s, &c);
  xh[i] = cuda::from_float<T>(static_cast<float>(a * c - b * s));
  xh[i + half] = cuda::from_float<T>(static_cast<float>(b * c + a * s));
}

}  // namespace

Status rope_cuda(DType t, void* x, int tokens, long token_stride, int heads, int head_stride, int rot_dim,
                      const float* inv_freq, const int* pos, RopeLayout layout, Stream stream) {
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_stride || rot_dim > 2048)
    return Error{"rope: rot_dim must be even, positive, at most head_stride and at most 2048"};
  if (tokens < 0 || heads <= 0) return Error{"rope: tokens must be >= 0 and heads > 0"};
  if (tokens == 0) return {};
  const int threads = (rot_dim / 2 + 31) / 32 * 32;
  return cuda::with_act_type(t, "rope", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<tokens * heads, threads, 0, stream>>>(static_cast<T*>(x), token_stride, heads, head_stride,
                                                           rot_dim, inv_freq, pos, layout == RopeLayout::interleaved);
    return TANDEM_CUDA_LAUNCHED("rope_kernel");
  });
}

}  // namespace tandem::kernels
