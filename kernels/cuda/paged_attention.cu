// Paged attention over a bf16 or fp8_e4m3 KV cache, and the cache write that quantises into it.
//
// Attention: one block of 4 warps per (query token, query head). The query sits in shared memory
// as fp32; warp w takes keys w, w+4, ...: its lanes split the head dimension for the q.k dot
// product (a warp sum) and for the value accumulator, with an online softmax (running max m,
// running denominator l). The block then merges the four (m, l, acc) triples.
#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/paged_attention.hpp"

namespace tandem::kernels {
namespace {

constexpr int kWarps = 4, kMaxDim = 576, kPerLane = kMaxDim / 32;
using fp8 = __nv_fp8_storage_t;  // one byte, e4m3 here

__device__ __forceinline__ float kv_load(const cuda::bf16* p, float) { return __bfloat162float(*p); }
__device__ __forceinline__ float kv_load(const fp8* p, float scale) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(*p, __NV_E4M3))) * scale;
}
__device__ __forceinline__ void kv_store(cuda::bf16* p, float x, float) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void kv_store(fp8* p, float x, float scale) {
  *p = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

template <class T, class KV>
__global__ void write_kv_kernel(const T* k, const T* v, int n, const std::int32_t* slot, int kv_heads, int qk_dim,
                                int v_dim, KV* k_cache, KV* v_cache, float k_scale, float v_scale) {
  const long krow = static_cast<long>(kv_heads) * qk_dim, vrow = static_cast<long>(kv_heads) * v_dim;
  const long total = n * (krow + vrow);
  for (long e = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<long>(gridDim.x) * blockDim.x) {
    const long t = e / (krow + vrow), i = e % (krow + vrow);
    const long s = slot[t];
    if (s < 0) continue;
    if (i < krow) kv_store(k_cache + s * krow + i, cuda::to_float(k[t * krow + i]), k_scale);
    else kv_store(v_cache + s * vrow + (i - krow), cuda::to_float(v[t * vrow + (i - krow)]), v_scale);
  }
}

template <class T, class KV>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const T* q, const std::int32_t* token_seq, const std::int32_t* token_pos, int q_heads,
                           PagedKvLayout l, const KV* k_cache, const KV* v_cache, const std::int32_t* block_tables,
                           int max_blocks, float scale, T* out) {
  __shared__ float qs[kMaxDim];
  __shared__ float part_m[kWarps], part_l[kWarps], part_acc[kWarps][kMaxDim];
  const int token = blockIdx.x / q_heads, h = blockIdx.x % q_heads, g = h / (q_heads / l.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* qh = q + (static_cast<long>(token) * q_heads + h) * l.qk_dim;
  for (int d = threadIdx.x; d < l.qk_dim; d += blockDim.x) qs[d] = cuda::to_float(qh[d]);
  __syncthreads();

  const std::int32_t* table = block_tables + static_cast<long>(token_seq[token]) * max_blocks;
  const int last = token_pos[token];
  float m = -INFINITY, sum = 0.f, acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.f;
  for (int j = warp; j <= last; j += kWarps) {
    const long slot = static_cast<long>(table[j / l.block_size]) * l.block_size + j % l.block_size;
    const KV* kj = k_cache + (slot * l.kv_heads + g) * l.qk_dim;
    const KV* vj = v_cache + (slot * l.kv_heads + g) * l.v_dim;
    float dot = 0.f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < l.qk_dim) dot += qs[d] * kv_load(kj + d, l.k_scale);
    }
    const float s = cuda::warp_sum(dot) * scale;
    const float m_new = fmaxf(m, s), correction = expf(m - m_new), p = expf(s - m_new);
    sum = sum * correction + p;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < l.v_dim) acc[c] = acc[c] * correction + p * kv_load(vj + d, l.v_scale);
    }
    m = m_new;
  }
  if (lane == 0) part_m[warp] = m, part_l[warp] = sum;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c)
    if (lane + 32 * c < l.v_dim) part_acc[warp][lane + 32 * c] = acc[c];
  __syncthreads();

  float big = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big = fmaxf(big, part_m[w]);
  float denom = 0.f, weight[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = part_m[w] == -INFINITY ? 0.f : expf(part_m[w] - big);  // a warp that saw no key adds nothing
    denom += part_l[w] * weight[w];
  }
  T* oh = out + (static_cast<long>(token) * q_heads + h) * l.v_dim;
  for (int d = threadIdx.x; d < l.v_dim; d += blockDim.x) {
    float o = 0.f;
    for (int w = 0; w < kWarps; ++w) o += part_acc[w][d] * weight[w];
    oh[d] = cuda::from_float<T>(denom > 0.f ? o / denom : 0.f);
  }
}

std::string check_layout(const PagedKvLayout& l, const char* op) {
  const std::string name(op);
  if (l.dtype != DType::bf16 && l.dtype != DType::fp8_e4m3)
    return name + ": the KV cache must be bf16 or fp8_e4m3, not " + dtype_name(l.dtype);
  if (l.block_size <= 0 || l.kv_heads <= 0) return name + ": block_size and kv_heads must be > 0";
  if (l.qk_dim <= 0 || l.qk_dim > kMaxDim || l.v_dim <= 0 || l.v_dim > kMaxDim)
    return name + ": qk_dim and v_dim must be in [1, 576]";
  if (!(l.k_scale > 0.f) || !(l.v_scale > 0.f)) return name + ": k_scale and v_scale must be > 0";
  return {};
}

// Runs f(act_tag, kv_tag) for the activation type and the cache type.
template <class F>
std::string with_types(DType act, DType kv, const char* op, F&& f) {
  return cuda::with_act_type(act, op, [&](auto a) {
    return kv == DType::bf16 ? f(a, cuda::bf16{}) : f(a, fp8{});
  });
}

}  // namespace

std::string write_kv_cuda(DType act, const void* k, const void* v, int n_tokens, const std::int32_t* slot_mapping,
                          const PagedKvLayout& l, void* k_cache, void* v_cache, Stream stream) {
  if (std::string bad = check_layout(l, "write_kv"); !bad.empty()) return bad;
  if (n_tokens < 0) return "write_kv: n_tokens must be >= 0";
  if (n_tokens == 0) return {};
  const long total = static_cast<long>(n_tokens) * l.kv_heads * (l.qk_dim + l.v_dim);
  const int blocks = static_cast<int>(std::min<long>((total + 255) / 256, 65536));
  return with_types(act, l.dtype, "write_kv", [&](auto a, auto c) {
    using T = decltype(a);
    using KV = decltype(c);
    write_kv_kernel<T, KV><<<blocks, 256, 0, stream>>>(static_cast<const T*>(k), static_cast<const T*>(v), n_tokens,
                                                       slot_mapping, l.kv_heads, l.qk_dim, l.v_dim,
                                                       static_cast<KV*>(k_cache), static_cast<KV*>(v_cache), l.k_scale,
                                                       l.v_scale);
    return cuda::launch_error("write_kv_kernel");
  });
}

std::string paged_attention_cuda(DType act, const void* q, int n_tokens, const std::int32_t* token_seq,
                                 const std::int32_t* token_pos, int q_heads, const PagedKvLayout& l,
                                 const void* k_cache, const void* v_cache, const std::int32_t* block_tables,
                                 int max_blocks_per_seq, float scale, void* out, Stream stream) {
  if (std::string bad = check_layout(l, "paged_attention"); !bad.empty()) return bad;
  if (q_heads <= 0 || q_heads % l.kv_heads != 0) return "paged_attention: q_heads must be a multiple of kv_heads";
  if (n_tokens < 0 || max_blocks_per_seq <= 0) return "paged_attention: n_tokens >= 0 and max_blocks_per_seq > 0";
  if (n_tokens == 0) return {};
  return with_types(act, l.dtype, "paged_attention", [&](auto a, auto c) {
    using T = decltype(a);
    using KV = decltype(c);
    paged_attention_kernel<T, KV><<<n_tokens * q_heads, kWarps * 32, 0, stream>>>(
        static_cast<const T*>(q), token_seq, token_pos, q_heads, l, static_cast<const KV*>(k_cache),
        static_cast<const KV*>(v_cache), block_tables, max_blocks_per_seq, scale, static_cast<T*>(out));
    return cuda::launch_error("paged_attention_kernel");
  });
}

}  // namespace tandem::kernels
