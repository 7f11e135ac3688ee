// glm5_next's DSA sparse attention on the GPU (tandem/kernels/glm5_next.hpp): the pool rows each token
// writes (fp32, bf16 or fp8_e4m3), the lightning indexer's choice of keys, and the absorbed attention
// over them. CPU references in kernels/cpu/glm5_next.cpp; checked by gpu_check glm5_next.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>

#include "common.cuh"
#include "tandem/kernels/glm5_next.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
using cuda::block_max;
using cuda::block_sum;
using cuda::warp_sum;

// The pool's elements (DsaPool::type): T is float, bf16 or __nv_fp8_storage_t (x / scale).
template <class T>
__device__ __forceinline__ T* pool_row(const DsaPool& p, int seq, int pos) {
  const long slot = static_cast<long>(p.tables[static_cast<long>(seq) * p.max_blocks + pos / p.block_size]) * p.block_size +
                    pos % p.block_size;
  return static_cast<T*>(p.rows) + slot * p.width;
}

// Opts a kernel in to `shared` bytes of dynamic shared memory where that is past the 48 KB default.
template <class Kernel>
cudaError_t allow_shared(Kernel kernel, std::size_t shared) {
  return shared > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared))
                            : cudaSuccess;
}

// Launches kernel<T> for the pool's element type.
#define TANDEM_DSA_POOL_DISPATCH(pool, ...)                                          \
  switch ((pool).type) {                                                             \
    case DType::f32: { using T = float; __VA_ARGS__; break; }                        \
    case DType::bf16: { using T = bf16; __VA_ARGS__; break; }                        \
    case DType::fp8_e4m3: { using T = __nv_fp8_storage_t; __VA_ARGS__; break; }      \
  }

// The scale the pool's entries are stored at (a calibrated one from device memory where set).
__device__ __forceinline__ float pool_scale(const DsaPool& p) { return p.scale_at ? *p.scale_at : p.scale; }

// Where a row's entries go: into the pool, or (measuring, `amax` set) into a running max of |x|.
// |x| of a non-negative float orders as its bits do, so atomicMax on the bits is the float max.
template <class T>
struct RowSink {
  T* row;
  float scale;
  float* amax;
  __device__ void operator()(int i, float x) const {
    if (amax) atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(fabsf(x)));
    else cuda::store_scaled(row + i, x, scale);
  }
};

template <class T>
__global__ void dsa_prepare_kernel(DsaShape s, DsaNorms nw, const float* proj, long ld_proj, const std::int32_t* token_seq,
                                   const std::int32_t* token_pos, DsaPool pool, float* qr, float* iw, float* amax) {
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const float* p = proj + static_cast<long>(t) * ld_proj;
  const RowSink<T> put{pool_row<T>(pool, token_seq[t], token_pos[t]), pool_scale(pool), amax};
  // q_a norm
  float a = 0.f;
  for (int i = threadIdx.x; i < s.lora_q; i += blockDim.x) a += p[i] * p[i];
  const float rq = rsqrtf(block_sum(a, scratch) / static_cast<float>(s.lora_q) + s.rms_eps);
  for (int i = threadIdx.x; i < s.lora_q; i += blockDim.x)
    qr[static_cast<long>(t) * s.lora_q + i] = p[i] * rq * nw.q_a_norm[i];
  // latent norm and the raw shared key
  const float* c = p + s.lora_q;
  a = 0.f;
  for (int i = threadIdx.x; i < s.lora_kv; i += blockDim.x) a += c[i] * c[i];
  const float rc = rsqrtf(block_sum(a, scratch) / static_cast<float>(s.lora_kv) + s.rms_eps);
  for (int i = threadIdx.x; i < s.lora_kv; i += blockDim.x) put(i, c[i] * rc * nw.kv_a_norm[i]);
  for (int i = threadIdx.x; i < s.rope; i += blockDim.x) put(s.lora_kv + i, c[s.lora_kv + i]);
  const int ik = s.lora_kv + s.rope;
  const int D = s.index_dim;
  if (!s.indexer) {
    for (int i = threadIdx.x; i < 2 * D; i += blockDim.x) put(ik + i, 0.f);
    return;
  }
  const float* k = c + s.lora_kv + s.rope;
  a = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) a += k[i];
  const float mean = block_sum(a, scratch) / static_cast<float>(D);
  a = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) a += (k[i] - mean) * (k[i] - mean);
  const float inv = rsqrtf(block_sum(a, scratch) / static_cast<float>(D) + 1e-6f);
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    put(ik + i, (k[i] - mean) * inv * nw.k_norm[i] + nw.k_norm_bias[i]);
    put(ik + D + i, k[D + i]);
  }
  const float* wp = k + 2 * D;
  const float wscale = rsqrtf(static_cast<float>(s.index_heads));
  for (int h = threadIdx.x; h < s.index_heads; h += blockDim.x) iw[static_cast<long>(t) * s.index_heads + h] = wp[h] * wscale;
}

constexpr int kMaxIndexHeads = 64, kMaxIndexDim = 256;

template <class T>
__global__ void dsa_select_kernel(DsaShape s, DsaPool pool, const float* iq, long ld_iq, const float* iw,
                                  const float* ape, const std::int32_t* token_seq, const std::int32_t* token_pos,
                                  float* scores, std::int32_t* chosen, int max_pools, std::int32_t* sel,
                                  std::int32_t* sel_n, int max_sel) {
  extern __shared__ float q[];  // [index_heads * index_dim]
  const int t = blockIdx.x, seq = token_seq[t], pos = token_pos[t];
  const int kp = s.kpool, D = s.index_dim, IH = s.index_heads;
  const int n_pools = (pos + 1) / kp;
  const int budget = min(n_pools, s.index_topk / kp);
  for (int i = threadIdx.x; i < IH * D; i += blockDim.x) q[i] = iq[static_cast<long>(t) * ld_iq + i];
  __syncthreads();
  float* sc = scores + static_cast<long>(t) * max_pools;
  std::int32_t* ch = chosen + static_cast<long>(t) * max_pools;
  const float scale = rsqrtf(static_cast<float>(D)), ps = pool_scale(pool);
  const int ik_at = s.lora_kv + s.rope, ig_at = ik_at + D;
  // One warp per pool, its lanes over the key's channels (d = lane + 32 k): the pool's kp rows are
  // read coalesced, each channel's softmax over the pool's tokens weighting the indexer keys, then
  // per head the dot with the query, summed over the lanes. (A thread per pool had walked the
  // channels one after another, kp dependent loads each: 0.5 ms a token at 35 pools.)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int p = warp; p < n_pools; p += warps) {
    float key[kMaxIndexDim / 32];
    for (int k = 0; k < kMaxIndexDim / 32; ++k) {
      const int d = lane + 32 * k;
      key[k] = 0.f;
      if (d >= D) continue;
      float top = -FLT_MAX;
      for (int m = 0; m < kp; ++m) top = fmaxf(top, cuda::load_scaled(pool_row<T>(pool, seq, p * kp + m) + ig_at + d, ps) + ape[m * D + d]);
      float sum = 0.f, acc = 0.f;
      for (int m = 0; m < kp; ++m) {
        const T* r = pool_row<T>(pool, seq, p * kp + m);
        const float e = expf(cuda::load_scaled(r + ig_at + d, ps) + ape[m * D + d] - top);
        sum += e;
        acc += e * cuda::load_scaled(r + ik_at + d, ps);
      }
      key[k] = acc / sum;
    }
    float score = 0.f;
    for (int h = 0; h < IH; ++h) {
      float dot = 0.f;
      for (int k = 0; k < kMaxIndexDim / 32; ++k)
        if (lane + 32 * k < D) dot += q[h * D + lane + 32 * k] * key[k];
      dot = warp_sum(dot);
      score += iw[static_cast<long>(t) * IH + h] * fmaxf(0.f, dot * scale);
    }
    if (lane == 0) sc[p] = score;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < n_pools; p += blockDim.x) {
    int rank = 0;
    for (int o = 0; o < n_pools; ++o) rank += sc[o] > sc[p] || (sc[o] == sc[p] && o < p);
    ch[p] = rank < budget;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int p = 0; p < n_pools; ++p)
      if (ch[p])
        for (int m = 0; m < kp && n < max_sel; ++m) sel[static_cast<long>(t) * max_sel + n++] = p * kp + m;
    if (s.select_tail && kp > 1)
      for (int j = (pos + 1) - (pos + 1) % kp; j <= pos && n < max_sel; ++j) sel[static_cast<long>(t) * max_sel + n++] = j;
    sel_n[t] = n;
  }
}

// Block (token, head); dynamic shared memory: the query [lora_kv + rope] and the scores [max_sel].
template <class T>
__global__ void dsa_attention_kernel(DsaShape s, DsaPool pool, int heads, const float* q_lat, const float* q_rope, long ld_q,
                                     long head_stride, const std::int32_t* token_seq, const std::int32_t* sel,
                                     const std::int32_t* sel_n, int max_sel, float scale, float* out_lat) {
  // Dynamic shared memory: the selected rows' addresses [max_sel] (looked up once: the key, its
  // block-table entry and the row were three dependent loads in every iteration of both loops),
  // the query [lora_kv + rope], the scores [max_sel].
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ float scratch[32];
  const int t = blockIdx.x, h = blockIdx.y, seq = token_seq[t], L = s.lora_kv, W = s.lora_kv + s.rope;
  const T** rowp = reinterpret_cast<const T**>(shared_bytes);
  float* q = reinterpret_cast<float*>(shared_bytes + static_cast<std::size_t>(max_sel) * sizeof(const T*));
  float* score = q + W;
  const float* ql = q_lat + (static_cast<long>(t) * heads + h) * L;
  const float* qr = q_rope + static_cast<long>(t) * ld_q + static_cast<long>(h) * head_stride;
  for (int i = threadIdx.x; i < W; i += blockDim.x) q[i] = i < L ? ql[i] : qr[i - L];
  const int n = sel_n[t];
  const std::int32_t* keys = sel + static_cast<long>(t) * max_sel;
  for (int j = threadIdx.x; j < n; j += blockDim.x) rowp[j] = pool_row<T>(pool, seq, keys[j]);
  __syncthreads();
  const float ps = pool_scale(pool);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int j = warp; j < n; j += warps) {
    const T* r = rowp[j];
    float acc = 0.f;
    for (int i = lane; i < W; i += 32) acc += q[i] * cuda::load_scaled(r + i, ps);
    acc = warp_sum(acc);
    if (lane == 0) score[j] = acc * scale;
  }
  __syncthreads();
  float top = -FLT_MAX;
  for (int j = threadIdx.x; j < n; j += blockDim.x) top = fmaxf(top, score[j]);
  top = block_max(top, scratch);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += (score[j] = expf(score[j] - top));
  sum = block_sum(sum, scratch);
  float* out = out_lat + (static_cast<long>(t) * heads + h) * L;
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    float acc = 0.f;
#pragma unroll 4
    for (int j = 0; j < n; ++j) acc += score[j] * cuda::load_scaled(rowp[j] + i, ps);
    out[i] = n > 0 ? acc / sum : 0.f;
  }
}

__global__ void dsa_scale_from_amax_kernel(const float* amax, float target, float* scale) {
  const float a = *amax;
  *scale = a > 0.f && isfinite(a) ? a / target : 1.f;
}

}  // namespace

Status dsa_prepare_cuda(const DsaShape& s, const DsaNorms& n, const float* proj, long ld_proj, int tokens,
                             const std::int32_t* token_seq, const std::int32_t* token_pos, const DsaPool& pool,
                             float* qr, float* iw, Stream stream, float* amax) {
  if (tokens == 0) return {};
  TANDEM_DSA_POOL_DISPATCH(pool, (dsa_prepare_kernel<T><<<tokens, 128, 0, stream>>>(s, n, proj, ld_proj, token_seq,
                                                                                      token_pos, pool, qr, iw, amax)));
  return TANDEM_CUDA_LAUNCHED("dsa_prepare_kernel");
}

Status dsa_scale_from_amax_cuda(const float* amax, float target, float* scale, Stream stream) {
  dsa_scale_from_amax_kernel<<<1, 1, 0, stream>>>(amax, target, scale);
  return TANDEM_CUDA_LAUNCHED("dsa_scale_from_amax_kernel");
}

Status dsa_select_cuda(const DsaShape& s, const DsaPool& pool, const float* iq, long ld_iq, const float* iw,
                            const float* kpool_ape, int tokens, const std::int32_t* token_seq,
                            const std::int32_t* token_pos, float* scores, std::int32_t* chosen, int max_pools,
                            std::int32_t* sel, std::int32_t* sel_n, int max_sel, Stream stream) {
  if (s.index_heads < 1 || s.index_heads > kMaxIndexHeads) return Error{"dsa_select_cuda: index_n_heads must be in [1, 64]"};
  if (s.index_dim < 1 || s.index_dim > kMaxIndexDim) return Error{"dsa_select_cuda: index_head_dim must be in [1, 256]"};
  if (s.kpool < 1) return Error{"dsa_select_cuda: index_kpool must be at least 1"};
  if (max_sel < s.index_topk + s.kpool) return Error{"dsa_select_cuda: max_sel below index_topk + index_kpool"};
  if (tokens == 0) return {};
  (void)max_pools;
  const std::size_t shared = static_cast<std::size_t>(s.index_heads) * static_cast<std::size_t>(s.index_dim) * sizeof(float);
  cudaError_t attr = cudaSuccess;
  TANDEM_DSA_POOL_DISPATCH(pool, {
    attr = allow_shared(dsa_select_kernel<T>, shared);
    if (attr == cudaSuccess)
      dsa_select_kernel<T><<<tokens, 256, shared, stream>>>(s, pool, iq, ld_iq, iw, kpool_ape, token_seq, token_pos, scores,
                                                            chosen, max_pools, sel, sel_n, max_sel);
  });
  if (attr != cudaSuccess) return TANDEM_CUDA_LAUNCHED("dsa_select_kernel shared memory");
  return TANDEM_CUDA_LAUNCHED("dsa_select_kernel");
}

Status dsa_attention_cuda(const DsaShape& s, const DsaPool& pool, int heads, const float* q_lat, const float* q_rope,
                               long ld_q, long head_stride, int tokens, const std::int32_t* token_seq,
                               const std::int32_t* sel, const std::int32_t* sel_n, int max_sel, float scale,
                               float* out_lat, Stream stream) {
  if (tokens == 0) return {};
  const std::size_t shared = static_cast<std::size_t>(s.lora_kv + s.rope + max_sel) * sizeof(float) +
                             static_cast<std::size_t>(max_sel) * sizeof(void*);
  const dim3 grid(tokens, heads);
  cudaError_t attr = cudaSuccess;
  TANDEM_DSA_POOL_DISPATCH(pool, {
    attr = allow_shared(dsa_attention_kernel<T>, shared);
    if (attr == cudaSuccess)
      dsa_attention_kernel<T><<<grid, 128, shared, stream>>>(s, pool, heads, q_lat, q_rope, ld_q, head_stride, token_seq, sel,
                                                             sel_n, max_sel, scale, out_lat);
  });
  if (attr != cudaSuccess) return TANDEM_CUDA_LAUNCHED("dsa_attention_kernel shared memory");
  return TANDEM_CUDA_LAUNCHED("dsa_attention_kernel");
}

}  // namespace tandem::kernels
