// One block per row; each thread strides over the row, then a shared-memory tree reduction.
#include <cuda_runtime.h>

#include <string>

#include "tandem/kernels/cuda_check.hpp"
#include "tandem/kernels/rmsnorm.hpp"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, int n, float eps) {
  __shared__ float partial[kThreads];
  const float* xr = x + static_cast<long>(blockIdx.x) * n;
  float* yr = y + static_cast<long>(blockIdx.x) * n;
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += xr[i] * xr[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

}  // namespace

bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

Status rmsnorm_cuda(const float* x, const float* w, float* y, int rows, int n, float eps) {
  const size_t xbytes = sizeof(float) * static_cast<size_t>(rows) * static_cast<size_t>(n);
  const size_t wbytes = sizeof(float) * static_cast<size_t>(n);
  float *dx = nullptr, *dw = nullptr, *dy = nullptr;
  // Every buffer is freed whichever step fails: the steps run in a lambda that stops at the first.
  const Status status = [&]() -> Status {
    if (auto e = TANDEM_CUDA_STATUS(cudaMalloc(&dx, xbytes), "x"); !e) return e;
    if (auto e = TANDEM_CUDA_STATUS(cudaMalloc(&dw, wbytes), "w"); !e) return e;
    if (auto e = TANDEM_CUDA_STATUS(cudaMalloc(&dy, xbytes), "y"); !e) return e;
    if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(dx, x, xbytes, cudaMemcpyHostToDevice), "copy x"); !e) return e;
    if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice), "copy w"); !e) return e;
    rmsnorm_kernel<<<rows, kThreads>>>(dx, dw, dy, n, eps);
    if (auto e = TANDEM_CUDA_LAUNCHED("rmsnorm_kernel"); !e) return e;
    return TANDEM_CUDA_STATUS(cudaMemcpy(y, dy, xbytes, cudaMemcpyDeviceToHost), "copy y");
  }();
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
  return status;
}

}  // namespace tandem::kernels
