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

// rope_copy_cuda: block = token; the token's cos / sin in shared memory (fp64, as rope_kernel
// computes them) and its heads' source pairs (as floats, read before any is written: src may be
// dst), then every (head, pair) of the token into dst.
template <class T>
__global__ void rope_copy_kernel(RopeCopy c, int heads, int rot_dim, const float* inv_freq, const int* pos, bool interleaved) {
  extern __shared__ double cos_sin[];  // [half] cosines, [half] sines, then [heads][half] a and b
  const int token = blockIdx.x, half = rot_dim / 2;
  float* ab = reinterpret_cast<float*>(cos_sin + rot_dim);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    if (c.angles) {
      cos_sin[i] = c.angles[static_cast<long>(token) * rot_dim + i];
      cos_sin[half + i] = c.angles[static_cast<long>(token) * rot_dim + half + i];
    } else {
      const float angle = static_cast<float>(pos[token]) * inv_freq[i];  // fp32, as the reference forms it
      sincos(static_cast<double>(angle), &cos_sin[half + i], &cos_sin[i]);
    }
  }
  const T* src = static_cast<const T*>(c.src) + token * c.src_token_stride;
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int head = j / half, i = j % half;
    const T* xs = src + static_cast<long>(head) * c.src_head_stride;
    ab[2 * j] = cuda::to_float(interleaved ? xs[2 * i] : xs[i]);
    ab[2 * j + 1] = cuda::to_float(interleaved ? xs[2 * i + 1] : xs[i + half]);
  }
  __syncthreads();
  T* dst = static_cast<T*>(c.dst) + token * c.dst_token_stride;
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int head = j / half, i = j % half;
    const float a = ab[2 * j], b = ab[2 * j + 1];
    const double co = cos_sin[i], si = cos_sin[half + i];
    T* xd = dst + static_cast<long>(head) * c.dst_head_stride;
    xd[i] = cuda::from_float<T>(static_cast<float>(a * co - b * si));
    xd[i + half] = cuda::from_float<T>(static_cast<float>(b * co + a * si));
  }
}

// A thread per (token, pair).
__global__ void rope_angles_kernel(const float* inv_freq, const int* pos, int tokens, int half, double* angles) {
  const long k = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (k >= static_cast<long>(tokens) * half) return;
  const long t = k / half;
  const int i = static_cast<int>(k % half);
  const float angle = static_cast<float>(pos[t]) * inv_freq[i];  // fp32, as the reference forms it
  sincos(static_cast<double>(angle), &angles[t * 2 * half + half + i], &angles[t * 2 * half + i]);
}

}  // namespace

Status rope_angles_cuda(const float* inv_freq, const int* pos, int tokens, int rot_dim, double* angles, Stream stream) {
  if (rot_dim <= 0 || rot_dim % 2 != 0 || tokens < 0) return Error{"rope_angles: rot_dim must be even and positive, tokens >= 0"};
  if (tokens == 0) return {};
  const long n = static_cast<long>(tokens) * (rot_dim / 2);
  rope_angles_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(inv_freq, pos, tokens, rot_dim / 2, angles);
  return TANDEM_CUDA_LAUNCHED("rope_angles_kernel");
}

Status rope_copy_cuda(DType t, const RopeCopy& c, int tokens, int heads, int rot_dim, const float* inv_freq, const int* pos,
                      RopeLayout layout, Stream stream) {
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > 2048 || rot_dim > c.src_head_stride || rot_dim > c.dst_head_stride)
    return Error{"rope_copy: rot_dim must be even, positive, at most 2048 and at most both head strides"};
  if (tokens < 0 || heads <= 0) return Error{"rope_copy: tokens must be >= 0 and heads > 0"};
  const std::size_t smem = static_cast<std::size_t>(rot_dim) * sizeof(double) + static_cast<std::size_t>(heads) * rot_dim * sizeof(float);
  if (smem > 48 * 1024) return Error{"rope_copy: heads x rot_dim must be at most 11264 (a token's pairs are staged in shared memory)"};
  if (tokens == 0) return {};
  return cuda::with_act_type(t, "rope_copy", [&](auto tag) {
    using T = decltype(tag);
    rope_copy_kernel<T><<<tokens, 256, smem, stream>>>(c, heads, rot_dim, inv_freq, pos, layout == RopeLayout::interleaved);
    return TANDEM_CUDA_LAUNCHED("rope_copy_kernel");
  });
}

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
