#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "glue_kernels.hpp"

namespace tandem::model::cuda {
namespace {

using bf16 = __nv_bfloat16;

std::string launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(what) + ": " + cudaGetErrorString(e);
}

__global__ void rmsnorm_rows_kernel(const bf16* x, long ldx, int n, const bf16* w, bf16* y, long ldy, float eps) {
  __shared__ float part[32];
  const bf16* xr = x + blockIdx.x * ldx;
  bf16* yr = y + blockIdx.x * ldy;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    s += v * v;
  }
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += part[i];
  const float r = rsqrtf(total / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) * r * __bfloat162float(w[i]));
}

__device__ __forceinline__ float widen(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(float v) { return v; }

template <class D>
__global__ void add_rmsnorm_kernel(float* x, const D* delta, const bf16* w, bf16* y, float* y32, int n, float eps) {
  __shared__ float part[32];
  float* xr = x + static_cast<long>(blockIdx.x) * n;
  const D* dr = delta + static_cast<long>(blockIdx.x) * n;
  bf16* yr = y + static_cast<long>(blockIdx.x) * n;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] + widen(dr[i]);
    xr[i] = v;
    s += v * v;
  }
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += part[i];
  const float r = rsqrtf(total / static_cast<float>(n) + eps);
  float* y32r = y32 ? y32 + static_cast<long>(blockIdx.x) * n : nullptr;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * r * __bfloat162float(w[i]);
    yr[i] = __float2bfloat16_rn(v);
    if (y32r) y32r[i] = v;
  }
}

template <class KV>
__device__ void store(KV* p, float x, float scale);
template <>
__device__ void store<bf16>(bf16* p, float x, float) { *p = __float2bfloat16_rn(x); }
template <>
__device__ void store<__nv_fp8_storage_t>(__nv_fp8_storage_t* p, float x, float scale) {
  *p = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

template <class KV>
__global__ void latent_cache_write_kernel(const bf16* src, long ld, int width, const std::int32_t* token_seq,
                                          const std::int32_t* token_pos, const std::int32_t* tables, int max_blocks,
                                          int block_size, float scale, KV* cache) {
  const int t = blockIdx.x, pos = token_pos[t];
  const long slot = static_cast<long>(tables[static_cast<long>(token_seq[t]) * max_blocks + pos / block_size]) * block_size +
                    pos % block_size;
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    store<KV>(cache + slot * width + i, __bfloat162float(src[t * ld + i]), scale);
}

// One block per token; non-negative floats order as their bit patterns do, so an integer
// atomicMax on the bits is a float max.
__global__ void latent_amax_kernel(const bf16* src, long ld, int width, float* amax) {
  float m = 0.f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) m = fmaxf(m, fabsf(__bfloat162float(src[blockIdx.x * ld + i])));
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

__global__ void gather_rows_kernel(const bf16* src, int width, const std::int32_t* rows, bf16* dst) {
  const bf16* s = src + static_cast<long>(rows[blockIdx.x]) * width;
  bf16* d = dst + static_cast<long>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

}  // namespace

std::string rmsnorm_rows(const void* x, long ldx, int rows, int n, const void* w, void* y, long ldy, float eps,
                         kernels::Stream stream) {
  if (rows == 0) return {};
  rmsnorm_rows_kernel<<<rows, 256, 0, stream>>>(static_cast<const bf16*>(x), ldx, n, static_cast<const bf16*>(w),
                                                static_cast<bf16*>(y), ldy, eps);
  return launched("rmsnorm_rows_kernel");
}

std::string add_rmsnorm(float* x, const void* delta, kernels::DType delta_type, const void* w, void* y, int rows, int n,
                        float eps, kernels::Stream stream, float* y32) {
  if (rows == 0) return {};
  if (delta_type == kernels::DType::f32)
    add_rmsnorm_kernel<<<rows, 256, 0, stream>>>(x, static_cast<const float*>(delta), static_cast<const bf16*>(w),
                                                 static_cast<bf16*>(y), y32, n, eps);
  else
    add_rmsnorm_kernel<<<rows, 256, 0, stream>>>(x, static_cast<const bf16*>(delta), static_cast<const bf16*>(w),
                                                 static_cast<bf16*>(y), y32, n, eps);
  return launched("add_rmsnorm_kernel");
}

std::string latent_cache_write(const void* src, long ld, int tokens, int width, const std::int32_t* token_seq,
                               const std::int32_t* token_pos, const std::int32_t* block_tables, int max_blocks,
                               int block_size, kernels::DType cache_type, float scale, void* cache,
                               kernels::Stream stream) {
  if (tokens == 0) return {};
  if (cache_type == kernels::DType::bf16)
    latent_cache_write_kernel<bf16><<<tokens, 128, 0, stream>>>(static_cast<const bf16*>(src), ld, width, token_seq,
                                                               token_pos, block_tables, max_blocks, block_size, scale,
                                                               static_cast<bf16*>(cache));
  else if (cache_type == kernels::DType::fp8_e4m3)
    latent_cache_write_kernel<__nv_fp8_storage_t><<<tokens, 128, 0, stream>>>(
        static_cast<const bf16*>(src), ld, width, token_seq, token_pos, block_tables, max_blocks, block_size, scale,
        static_cast<__nv_fp8_storage_t*>(cache));
  else
    return "latent_cache_write: the cache must be bf16 or fp8_e4m3";
  return launched("latent_cache_write_kernel");
}

std::string latent_amax(const void* src, long ld, int tokens, int width, float* amax, kernels::Stream stream) {
  if (tokens == 0) return {};
  latent_amax_kernel<<<tokens, 128, 0, stream>>>(static_cast<const bf16*>(src), ld, width, amax);
  return launched("latent_amax_kernel");
}

std::string gather_rows(const void* src, int width, const std::int32_t* rows, int n, void* dst, kernels::Stream stream) {
  if (n == 0) return {};
  gather_rows_kernel<<<n, 256, 0, stream>>>(static_cast<const bf16*>(src), width, rows, static_cast<bf16*>(dst));
  return launched("gather_rows_kernel");
}

}  // namespace tandem::model::cuda
