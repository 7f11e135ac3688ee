// x += residual; y = rmsnorm(x) * w. One block per row: the first pass adds, stores the new
// residual stream (rounded to T) and sums its squares; the second normalises what was stored.
#include "common.cuh"
#include "tandem/kernels/rmsnorm.hpp"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void rmsnorm_residual_kernel(T* x, const T* residual, const T* w, T* y, int n, float eps) {
  __shared__ float scratch[32];
  T* xr = x + static_cast<long>(blockIdx.x) * n;
  const T* rr = residual + static_cast<long>(blockIdx.x) * n;
  T* yr = y + static_cast<long>(blockIdx.x) * n;
  float sum_sq = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const T s = cuda::from_float<T>(cuda::to_float(xr[i]) + cuda::to_float(rr[i]));
    xr[i] = s;
    const float sf = cuda::to_float(s);
    sum_sq += sf * sf;
  }
  sum_sq = cuda::block_sum(sum_sq, scratch);
  const float inv = rsqrtf(sum_sq / static_cast<float>(n) + eps);
  // Each thread reads back only the entries it wrote itself: no barrier needed.
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = cuda::from_float<T>(cuda::to_float(xr[i]) * inv * cuda::to_float(w[i]));
}

}  // namespace

Status rmsnorm_residual_cuda(DType t, void* x, const void* residual, const void* w, void* y, int rows, int n,
                                  float eps, Stream stream) {
  if (rows < 0 || n <= 0) return Error{"rmsnorm_residual: rows must be >= 0 and n > 0"};
  if (rows == 0) return {};
  return cuda::with_act_type(t, "rmsnorm_residual", [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_residual_kernel<T><<<rows, kThreads, 0, stream>>>(static_cast<T*>(x), static_cast<const T*>(residual),
                                                              static_cast<const T*>(w), static_cast<T*>(y), n, eps);
    return TANDEM_CUDA_LAUNCHED("rmsnorm_residual_kernel");
  });
}

}  // namespace tandem::kernels
