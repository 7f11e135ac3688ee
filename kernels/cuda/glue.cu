#include <cuda_bf16.h>

#include <algorithm>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common.cuh"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/launch.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
using cuda::block_sum_in_order;
using cuda::row_rms_scale;
using cuda::warp_max;

__global__ void rmsnorm_rows_kernel(const bf16* x, long ldx, int n, const bf16* w, bf16* y, long ldy, float eps) {
  cuda::pdl_begin();
  __shared__ float part[32];
  const bf16* xr = x + blockIdx.x * ldx;
  bf16* yr = y + blockIdx.x * ldy;
  const float r = row_rms_scale(xr, n, eps, part);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) * r * __bfloat162float(w[i]));
}

__device__ __forceinline__ float widen(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(float v) { return v; }

// Entries per thread whose loads are issued together: a loop that stores into x between its loads
// (which the compiler must assume may alias) waits one memory latency per entry, eight of them for
// a 2048-wide row: most of this kernel's time at batch 1. The sums keep their order.
constexpr int kBatch = 8;

// A norm's first round of weights (kBatch entries a thread, as the norm reads them): constant, so
// its kernels load it before waiting for their input's kernel.
__device__ __forceinline__ void first_round_weights(const bf16* w, int n, float (&g0)[kBatch]) {
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x);
    g0[j] = i < n ? __bfloat162float(w[i]) : 0.f;
  }
}

// The first round's norm weights are constant: loaded before waiting for delta's kernel.
template <class D>
__global__ void add_rmsnorm_kernel(float* x, const D* delta, const bf16* w, bf16* y, float* y32, int n, float eps,
                                   const std::int32_t* pick) {
  const int step = static_cast<int>(blockDim.x);
  float g0[kBatch];
  first_round_weights(w, n, g0);
  cuda::pdl_begin();
  __shared__ float part[32];
  const long row = pick ? pick[blockIdx.x] : blockIdx.x;  // y's row is blockIdx.x either way
  float* xr = x + row * n;
  const D* dr = delta + row * n;
  bf16* yr = y + static_cast<long>(blockIdx.x) * n;
  float s = 0.f;
  for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * step) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * step;
      v[j] = i < n ? xr[i] + widen(dr[i]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * step;
      if (i < n) {
        xr[i] = v[j];
        s += v[j] * v[j];
      }
    }
  }
  const float r = rsqrtf(block_sum_in_order(s, part) / static_cast<float>(n) + eps);
  float* y32r = y32 ? y32 + static_cast<long>(blockIdx.x) * n : nullptr;
  for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * step) {
    float v[kBatch], g[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * step;
      v[j] = i < n ? xr[i] : 0.f;
      g[j] = i0 == static_cast<int>(threadIdx.x) ? g0[j] : i < n ? __bfloat162float(w[i]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * step;
      if (i >= n) break;
      const float o = v[j] * r * g[j];
      yr[i] = __float2bfloat16_rn(o);
      if (y32r) y32r[i] = o;
    }
  }
}

// add_rmsnorm_kernel's first layer, the embedding rows added to a zeroed x, without either apart.
__global__ void embed_rmsnorm_kernel(const bf16* table, int vocab, const std::int32_t* ids, float* x, const bf16* w, bf16* y,
                                     int n, float eps) {
  cuda::pdl_begin();
  __shared__ float part[32];
  const std::int32_t id = ids[blockIdx.x];
  const bf16* er = id >= 0 && id < vocab ? table + static_cast<long>(id) * n : nullptr;  // outside: a zero row
  float* xr = x + static_cast<long>(blockIdx.x) * n;
  bf16* yr = y + static_cast<long>(blockIdx.x) * n;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = 0.f + (er ? __bfloat162float(er[i]) : 0.f);
    xr[i] = v;
    s += v * v;
  }
  const float r = rsqrtf(block_sum_in_order(s, part) / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __float2bfloat16_rn(xr[i] * r * __bfloat162float(w[i]));
}

template <class KV>
__global__ void latent_cache_write_kernel(const bf16* src, long ld, int width, const std::int32_t* token_seq,
                                          const std::int32_t* token_pos, const std::int32_t* tables, int max_blocks,
                                          int block_size, float scale, KV* cache) {
  const int t = blockIdx.x, pos = token_pos[t];
  const long slot = static_cast<long>(tables[static_cast<long>(token_seq[t]) * max_blocks + pos / block_size]) * block_size +
                    pos % block_size;
  for (int i = threadIdx.x; i < width; i += blockDim.x)
    cuda::store_scaled(cache + slot * width + i, __bfloat162float(src[t * ld + i]), scale);
}

// One block per row; 8 entries a thread-step (16 bytes of bf16 out).
template <class KV>
__global__ void latent_gather_kernel(const KV* cache, float scale, const std::int32_t* table, int block_size, int first, int width,
                                     bf16* dst) {
  const int j = blockIdx.x, row = first + j;
  const long slot = static_cast<long>(table[row / block_size]) * block_size + row % block_size;
  const KV* s = cache + slot * width;
  bf16* d = dst + static_cast<long>(j) * width;
  for (int i = 8 * threadIdx.x; i < width; i += 8 * blockDim.x) {
    if constexpr (sizeof(KV) == 2) {
      *reinterpret_cast<uint4*>(d + i) = *reinterpret_cast<const uint4*>(s + i);
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(s + i);
      const unsigned w[2] = {raw.x, raw.y};
      unsigned o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = cuda::fp8x2_to_float2(w[q / 2] >> (16 * (q % 2)));
        o[q] = cuda::pack_bf16(f.x * scale, f.y * scale);
      }
      *reinterpret_cast<uint4*>(d + i) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// One block per token; non-negative floats order as their bit patterns do, so an integer
// atomicMax on the bits is a float max.
__global__ void latent_amax_kernel(const bf16* src, long ld, int width, float* amax) {
  float m = 0.f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) m = fmaxf(m, fabsf(__bfloat162float(src[blockIdx.x * ld + i])));
  m = warp_max(m);
  if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

// T: bf16, or uint4 (8 bf16 a copy) where rows are whole 16-byte units (every caller's: hidden-
// wide rows for the LM head and the drafter's captured layers).
template <class T>
__global__ void gather_rows_kernel(const T* src, int width, const std::int32_t* rows, T* dst) {
  const T* s = src + static_cast<long>(rows[blockIdx.x]) * width;
  T* d = dst + static_cast<long>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

__global__ void add_f32_kernel(float* y, const float* x, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i]);  // no contraction with anything around it
}

// Block (t, 0): the query LoRA's norm; block (t, 1): the latent's norm, the key's rotation and the
// row's write into the pool. 256 threads, the sums in rmsnorm_rows_kernel's order.
// The pool slot comes from the step's inputs (positions, tables), copied before the step's first
// kernel: it is looked up before waiting for the input projection (programmatic launch).
template <class KV>
__global__ void latent_prep_kernel(LatentPrep p) {
  __shared__ float part[32];
  const int t = blockIdx.x;
  const bf16* row = static_cast<const bf16*>(p.fused) + t * p.ld;
  const bool query = blockIdx.y == 0;
  int pos = 0;
  long slot = 0;
  if (!query) {
    pos = p.token_pos[t];
    slot = static_cast<long>(p.block_tables[static_cast<long>(p.token_seq[t]) * p.max_blocks + pos / p.block_size]) * p.block_size +
           pos % p.block_size;
  }
  const int n = query ? p.lora_q : p.lora_kv;
  const bf16* w = static_cast<const bf16*>(query ? p.q_norm : p.kv_norm);
  // The norm's first round of weights, constant, also before the wait (kBatch entries a thread).
  const int step = static_cast<int>(blockDim.x);
  float g0[kBatch];
  first_round_weights(w, n, g0);
  // And the key's first round of rotations (pos and the frequencies are known; fp64 sincos is slow).
  const int half = p.rope_dim / 2;
  double sn0 = 0.0, cs0 = 0.0;
  if (!query && static_cast<int>(threadIdx.x) < half && !p.angles)
    sincos(static_cast<double>(static_cast<float>(pos) * p.inv_freq[threadIdx.x]), &sn0, &cs0);
  cuda::pdl_begin();
  if (query && p.lora_q == 0) return;
  const bf16* x = query ? row : row + p.kv_at;
  const float r = row_rms_scale(x, n, p.eps, part);
  // x * r * w, rounded to bf16, into y (the query's LoRA row) or through store into the pool row
  // (kv): a round's loads before its stores, which may alias them.
  auto normalised = [&](auto put) {
    for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * step) {
      float v[kBatch], g[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = i0 + j * step;
        v[j] = i < n ? __bfloat162float(x[i]) : 0.f;
        g[j] = i0 == static_cast<int>(threadIdx.x) ? g0[j] : i < n ? __bfloat162float(w[i]) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (i0 + j * step < n) put(i0 + j * step, __float2bfloat16_rn(v[j] * r * g[j]));
    }
  };
  if (query) {
    bf16* y = static_cast<bf16*>(p.qlat) + static_cast<long>(t) * p.lora_q;
    normalised([&](int i, bf16 v) { y[i] = v; });
    return;
  }
  const int width = p.lora_kv + p.rope_dim;
  KV* out = static_cast<KV*>(p.cache) + slot * width;
  normalised([&](int i, bf16 v) { cuda::store_scaled(out + i, __bfloat162float(v), p.scale); });
  const bf16* kr = x + p.lora_kv;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {  // as rope_kernel
    const float a = __bfloat162float(p.interleaved ? kr[2 * i] : kr[i]);
    const float b = __bfloat162float(p.interleaved ? kr[2 * i + 1] : kr[i + half]);
    double sn = sn0, cs = cs0;
    if (p.angles) cs = p.angles[static_cast<long>(t) * p.rope_dim + i], sn = p.angles[static_cast<long>(t) * p.rope_dim + half + i];
    else if (i != static_cast<int>(threadIdx.x)) sincos(static_cast<double>(static_cast<float>(pos) * p.inv_freq[i]), &sn, &cs);
    cuda::store_scaled(out + p.lora_kv + i, __bfloat162float(__float2bfloat16_rn(static_cast<float>(a * cs - b * sn))), p.scale);
    cuda::store_scaled(out + p.lora_kv + i + half, __bfloat162float(__float2bfloat16_rn(static_cast<float>(b * cs + a * sn))), p.scale);
  }
}

constexpr int kAbsorbThreads = 128, kAbsorbTokens = 4;

// Block (h, tile): columns tile * 128 + thread of head h's absorbed query, or (the last tile) the
// rotation of head h's rope entries. Weights W[d][j] are read along j: coalesced.
__global__ void absorb_query_kernel(const bf16* q, int tokens, int heads, int nope, int rope_dim, const bf16* kv_b,
                                    long kvb_stride, int lora_kv, const float* inv_freq, const std::int32_t* token_pos,
                                    bool interleaved, bf16* qattn) {
  cuda::pdl_begin();
  const int h = blockIdx.x, tiles = gridDim.y - 1;
  const int qk = nope + rope_dim, width = lora_kv + rope_dim;
  const long q_row = static_cast<long>(heads) * qk, o_row = static_cast<long>(heads) * width;
  if (static_cast<int>(blockIdx.y) == tiles) {
    const int half = rope_dim / 2;
    for (int e = threadIdx.x; e < tokens * half; e += blockDim.x) {
      const int t = e / half, i = e % half;
      const bf16* x = q + t * q_row + static_cast<long>(h) * qk + nope;
      const float a = __bfloat162float(interleaved ? x[2 * i] : x[i]);
      const float b = __bfloat162float(interleaved ? x[2 * i + 1] : x[i + half]);
      const float angle = static_cast<float>(token_pos[t]) * inv_freq[i];
      double sn, cs;
      sincos(static_cast<double>(angle), &sn, &cs);
      bf16* y = qattn + t * o_row + static_cast<long>(h) * width + lora_kv;
      y[i] = __float2bfloat16_rn(static_cast<float>(a * cs - b * sn));
      y[i + half] = __float2bfloat16_rn(static_cast<float>(b * cs + a * sn));
    }
    return;
  }
  const int j = blockIdx.y * kAbsorbThreads + threadIdx.x;
  if (j >= lora_kv) return;
  const bf16* w = kv_b + h * kvb_stride + j;
  for (int t0 = 0; t0 < tokens; t0 += kAbsorbTokens) {
    float acc[kAbsorbTokens] = {};
    const bf16* x = q + t0 * q_row + static_cast<long>(h) * qk;
#pragma unroll 8
    for (int d = 0; d < nope; ++d) {
      const float wd = __bfloat162float(w[static_cast<long>(d) * lora_kv]);
#pragma unroll
      for (int u = 0; u < kAbsorbTokens; ++u)
        if (t0 + u < tokens) acc[u] += __bfloat162float(x[u * q_row + d]) * wd;
    }
#pragma unroll
    for (int u = 0; u < kAbsorbTokens; ++u)
      if (t0 + u < tokens) qattn[(t0 + u) * o_row + static_cast<long>(h) * width + j] = __float2bfloat16_rn(acc[u]);
  }
}

__global__ void transpose_kb_kernel(const bf16* kv_b, int nope, int vd, int lora_kv, bf16* kb_t) {
  const int h = blockIdx.x, d = blockIdx.y;
  for (int j = threadIdx.x; j < lora_kv; j += blockDim.x)
    kb_t[(static_cast<long>(h) * lora_kv + j) * nope + d] = kv_b[(static_cast<long>(h) * (nope + vd) + d) * lora_kv + j];
}

}  // namespace

Status transpose_kb(const void* kv_b, int heads, int nope, int vd, int lora_kv, void* kb_t, Stream stream) {
  transpose_kb_kernel<<<dim3(static_cast<unsigned>(heads), static_cast<unsigned>(nope)), 256, 0, stream>>>(
      static_cast<const bf16*>(kv_b), nope, vd, lora_kv, static_cast<bf16*>(kb_t));
  return TANDEM_CUDA_LAUNCHED("transpose_kb_kernel");
}

Status latent_prep(const LatentPrep& p, Stream stream) {
  if (p.tokens == 0) return {};
  if (p.rope_dim % 2 != 0) return Error{"latent_prep: odd rope dimension"};
  const dim3 grid(static_cast<unsigned>(p.tokens), 2);
  cudaError_t e;
  if (p.cache_type == DType::bf16) e = cuda::launch_pdl(latent_prep_kernel<bf16>, grid, dim3(256), 0, stream, p);
  else if (p.cache_type == DType::fp8_e4m3)
    e = cuda::launch_pdl(latent_prep_kernel<__nv_fp8_storage_t>, grid, dim3(256), 0, stream, p);
  else return Error{"latent_prep: the cache must be bf16 or fp8_e4m3"};
  return TANDEM_CUDA_STATUS(e, "launch latent_prep_kernel");
}

Status absorb_query(const void* q, int tokens, int heads, int nope, int rope_dim, const void* kv_b, long kvb_stride,
                         int lora_kv, const float* inv_freq, const std::int32_t* token_pos, bool interleaved, void* qattn,
                         bool products, Stream stream) {
  if (tokens == 0) return {};
  if (rope_dim % 2 != 0) return Error{"absorb_query: odd rope dimension"};
  const int tiles = products ? (lora_kv + kAbsorbThreads - 1) / kAbsorbThreads : 0;
  const cudaError_t e = cuda::launch_pdl(
      absorb_query_kernel, dim3(static_cast<unsigned>(heads), static_cast<unsigned>(tiles + 1)), dim3(kAbsorbThreads), 0, stream,
      static_cast<const bf16*>(q), tokens, heads, nope, rope_dim, static_cast<const bf16*>(kv_b), kvb_stride, lora_kv, inv_freq,
      token_pos, interleaved, static_cast<bf16*>(qattn));
  return TANDEM_CUDA_STATUS(e, "launch absorb_query_kernel");
}

Status rmsnorm_rows(const void* x, long ldx, int rows, int n, const void* w, void* y, long ldy, float eps,
                         Stream stream) {
  if (rows == 0) return {};
  // Programmatic, as add_rmsnorm: between two decode-sized products (the DFlash drafter's context
  // rows, the MLA LoRA norms) an ordinary launch would serialise their weight loads.
  const cudaError_t e = cuda::launch_pdl(rmsnorm_rows_kernel, dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream,
                                         static_cast<const bf16*>(x), ldx, n, static_cast<const bf16*>(w), static_cast<bf16*>(y), ldy,
                                         eps);
  return TANDEM_CUDA_STATUS(e, "launch rmsnorm_rows_kernel");
}

Status add_rmsnorm(float* x, const void* delta, DType delta_type, const void* w, void* y, int rows, int n,
                        float eps, Stream stream, float* y32, const std::int32_t* pick) {
  if (rows == 0) return {};
  // A programmatic launch like the decode kernels around it, so that the next one's weight loads
  // may start while this runs (an ordinary launch in between would serialise them).
  const cudaError_t e =
      delta_type == DType::f32
          ? cuda::launch_pdl(add_rmsnorm_kernel<float>, dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream, x,
                                      static_cast<const float*>(delta), static_cast<const bf16*>(w), static_cast<bf16*>(y), y32, n, eps, pick)
          : cuda::launch_pdl(add_rmsnorm_kernel<bf16>, dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream, x,
                                      static_cast<const bf16*>(delta), static_cast<const bf16*>(w), static_cast<bf16*>(y), y32, n, eps, pick);
  return TANDEM_CUDA_STATUS(e, "launch add_rmsnorm_kernel");
}

Status embed_rmsnorm(const void* table, int vocab, const std::int32_t* ids, float* x, const void* w, void* y, int rows, int n,
                     float eps, Stream stream) {
  if (rows == 0) return {};
  const cudaError_t e = cuda::launch_pdl(embed_rmsnorm_kernel, dim3(static_cast<unsigned>(rows)), dim3(256), 0, stream,
                                         static_cast<const bf16*>(table), vocab, ids, x, static_cast<const bf16*>(w),
                                         static_cast<bf16*>(y), n, eps);
  return TANDEM_CUDA_STATUS(e, "launch embed_rmsnorm_kernel");
}

Status latent_cache_write(const void* src, long ld, int tokens, int width, const std::int32_t* token_seq,
                               const std::int32_t* token_pos, const std::int32_t* block_tables, int max_blocks,
                               int block_size, DType cache_type, float scale, void* cache,
                               Stream stream) {
  if (tokens == 0) return {};
  if (cache_type == DType::bf16)
    latent_cache_write_kernel<bf16><<<tokens, 128, 0, stream>>>(static_cast<const bf16*>(src), ld, width, token_seq,
                                                               token_pos, block_tables, max_blocks, block_size, scale,
                                                               static_cast<bf16*>(cache));
  else if (cache_type == DType::fp8_e4m3)
    latent_cache_write_kernel<__nv_fp8_storage_t><<<tokens, 128, 0, stream>>>(
        static_cast<const bf16*>(src), ld, width, token_seq, token_pos, block_tables, max_blocks, block_size, scale,
        static_cast<__nv_fp8_storage_t*>(cache));
  else
    return Error{"latent_cache_write: the cache must be bf16 or fp8_e4m3"};
  return TANDEM_CUDA_LAUNCHED("latent_cache_write_kernel");
}

Status latent_gather(const void* cache, DType cache_type, float scale, const std::int32_t* block_table, int block_size, int first,
                     int n, int width, void* dst, Stream stream) {
  if (n < 0 || first < 0 || block_size <= 0 || width <= 0 || width % 8 != 0)
    return Error{"latent_gather: n and first >= 0, block_size > 0 and width a positive multiple of 8 expected"};
  if (reinterpret_cast<std::uintptr_t>(cache) % 16 != 0 || reinterpret_cast<std::uintptr_t>(dst) % 16 != 0)
    return Error{"latent_gather: cache and dst must be 16-byte aligned"};
  if (n == 0) return {};
  if (cache_type == DType::bf16)
    latent_gather_kernel<bf16><<<n, 128, 0, stream>>>(static_cast<const bf16*>(cache), scale, block_table, block_size, first, width,
                                                      static_cast<bf16*>(dst));
  else if (cache_type == DType::fp8_e4m3)
    latent_gather_kernel<__nv_fp8_storage_t><<<n, 128, 0, stream>>>(static_cast<const __nv_fp8_storage_t*>(cache), scale, block_table,
                                                                    block_size, first, width, static_cast<bf16*>(dst));
  else
    return Error{"latent_gather: the cache must be bf16 or fp8_e4m3"};
  return TANDEM_CUDA_LAUNCHED("latent_gather_kernel");
}

Status latent_amax(const void* src, long ld, int tokens, int width, float* amax, Stream stream) {
  if (tokens == 0) return {};
  latent_amax_kernel<<<tokens, 128, 0, stream>>>(static_cast<const bf16*>(src), ld, width, amax);
  return TANDEM_CUDA_LAUNCHED("latent_amax_kernel");
}

Status gather_rows(const void* src, int width, const std::int32_t* rows, int n, void* dst, Stream stream) {
  if (n == 0) return {};
  if (width % 8 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0)
    gather_rows_kernel<<<n, 256, 0, stream>>>(static_cast<const uint4*>(src), width / 8, rows, static_cast<uint4*>(dst));
  else
    gather_rows_kernel<<<n, 256, 0, stream>>>(static_cast<const bf16*>(src), width, rows, static_cast<bf16*>(dst));
  return TANDEM_CUDA_LAUNCHED("gather_rows_kernel");
}

Status add_f32(float* y, const float* x, std::size_t n, Stream stream) {
  if (n == 0) return {};
  const std::size_t blocks = std::min<std::size_t>((n + 255) / 256, 4096);
  add_f32_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, x, n);
  return TANDEM_CUDA_LAUNCHED("add_f32_kernel");
}

}  // namespace tandem::kernels
