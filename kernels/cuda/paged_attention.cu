// Paged attention over a bf16 or fp8_e4m3 KV cache, and the cache write that quantises into it.
//
// Attention: one block of 4 warps per (query token, kv head, tile of that head's query heads,
// split of the keys). The queries sit in shared memory as fp32; warp w takes keys w, w+4, ... of
// the split: its lanes split the head dimension for the q.k dot products (warp sums) and the value
// accumulators, with an online softmax per query head (running max m, running denominator l).
// The block merges its four warps; when the keys are split (few queries, long contexts: the
// flash-decoding scheme) each split leaves (m, l, acc) in the workspace and combine_kernel merges.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "paged_attention_mla.hpp"
#include "split_softmax.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/paged_attention.hpp"

namespace tandem::kernels {
namespace {

constexpr int kWarps = 4, kMaxDim = 576;
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
  const long krow = static_cast<long>(kv_heads) * qk_dim, vrow = v_cache ? static_cast<long>(kv_heads) * v_dim : 0;
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

// Block (token, kv head g, tile of up to GT of g's query heads, split): the keys of the split,
// [split * per_split, its end), in the warps' stride. Each key's K and V are loaded once into
// registers (PER_LANE entries per lane) and used for every query head of the tile.
// long-function: each key's K/V stay in registers for every head of the tile, then the warps merge in shared memory.
template <class T, class KV, int PER_LANE, int GT>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const T* q, const std::int32_t* token_seq, const std::int32_t* token_pos, int q_heads,
                           PagedKvLayout l, const KV* k_cache, const KV* v_cache, const std::int32_t* block_tables,
                           int max_blocks, float scale, int per_split, T* out, float* part) {
  cuda::pdl_begin();
  constexpr int kDim = PER_LANE * 32;
  __shared__ float qs[GT][kDim];
  __shared__ float part_m[kWarps][GT], part_l[kWarps][GT], part_acc[kWarps][GT][kDim];
  const int group = q_heads / l.kv_heads, tiles = (group + GT - 1) / GT;
  const int token = blockIdx.x / (l.kv_heads * tiles), g = blockIdx.x / tiles % l.kv_heads;
  const int h0 = g * group + blockIdx.x % tiles * GT, nh = min(GT, g * group + group - h0);
  const int split = blockIdx.y, splits = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < GT * kDim; i += blockDim.x) {
    const int hh = i / kDim, d = i % kDim;
    qs[hh][d] = hh < nh && d < l.qk_dim ? cuda::to_float(q[(static_cast<long>(token) * q_heads + h0 + hh) * l.qk_dim + d]) : 0.f;
  }
  __syncthreads();

  const std::int32_t* table = block_tables + static_cast<long>(token_seq[token]) * max_blocks;
  const int pos = token_pos[token];
  const int begin = split * per_split, end = split == splits - 1 ? pos + 1 : min(pos + 1, begin + per_split);
  float m[GT], sum[GT], acc[GT][PER_LANE];
#pragma unroll
  for (int hh = 0; hh < GT; ++hh) {
    m[hh] = -INFINITY, sum[hh] = 0.f;
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) acc[hh][c] = 0.f;
  }
  for (int j = begin + warp; j < end; j += kWarps) {
    const long slot = static_cast<long>(table[j / l.block_size]) * l.block_size + j % l.block_size;
    const KV* kj = k_cache + (slot * l.kv_heads + g) * l.qk_dim;
    const KV* vj = l.v_in_k ? kj : v_cache + (slot * l.kv_heads + g) * l.v_dim;
    float kr[PER_LANE], vr[PER_LANE];
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) {
      const int d = lane + 32 * c;
      kr[c] = d < l.qk_dim ? kv_load(kj + d, l.k_scale) : 0.f;
      vr[c] = d >= l.v_dim ? 0.f : l.v_in_k ? kr[c] : kv_load(vj + d, l.v_scale);  // MLA: the value is the key's head
    }
#pragma unroll
    for (int hh = 0; hh < GT; ++hh) {
      float dot = 0.f;
#pragma unroll
      for (int c = 0; c < PER_LANE; ++c) dot += qs[hh][lane + 32 * c] * kr[c];
      const float s = cuda::warp_sum(dot) * scale;
      const float m_new = fmaxf(m[hh], s), correction = expf(m[hh] - m_new), p = expf(s - m_new);
      sum[hh] = sum[hh] * correction + p;
#pragma unroll
      for (int c = 0; c < PER_LANE; ++c) acc[hh][c] = acc[hh][c] * correction + p * vr[c];
      m[hh] = m_new;
    }
  }
#pragma unroll
  for (int hh = 0; hh < GT; ++hh) {
    if (lane == 0) part_m[warp][hh] = m[hh], part_l[warp][hh] = sum[hh];
#pragma unroll
    for (int c = 0; c < PER_LANE; ++c) part_acc[warp][hh][lane + 32 * c] = acc[hh][c];
  }
  __syncthreads();

  // Merge the warps; with one split that is the answer, otherwise a partial (m, l, acc) for combine.
  for (int i = threadIdx.x; i < nh * (l.v_dim + 1); i += blockDim.x) {
    const int hh = i / (l.v_dim + 1), d = i % (l.v_dim + 1) - 1;  // d == -1: the (m, l) pair
    float big = -INFINITY;
    for (int w = 0; w < kWarps; ++w) big = fmaxf(big, part_m[w][hh]);
    float denom = 0.f, o = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      const float weight = part_m[w][hh] == -INFINITY ? 0.f : expf(part_m[w][hh] - big);  // no keys: nothing
      denom += part_l[w][hh] * weight;
      if (d >= 0) o += part_acc[w][hh][d] * weight;
    }
    const long row = static_cast<long>(token) * q_heads + h0 + hh;
    if (splits == 1) {
      if (d >= 0) out[row * l.v_dim + d] = cuda::from_float<T>(denom > 0.f ? o / denom : 0.f);
    } else {
      float* pr = part + (row * splits + split) * (l.v_dim + 2);
      if (d < 0) pr[0] = big, pr[1] = denom;
      else pr[2 + d] = o;
    }
  }
}

// Merges the splits of one (token, query head): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
// Each split's weight e^(m_s - M) is computed once into shared memory (up to kMaxSplits splits).
using cuda::kMaxSplits;
template <class T>
__global__ void combine_kernel(const float* part, int splits, int v_dim, T* out) {
  cuda::pdl_begin();
  __shared__ float weight[kMaxSplits];
  __shared__ float scratch[32];
  const float* pr = part + static_cast<long>(blockIdx.x) * splits * (v_dim + 2);
  const float denom = cuda::split_weights(pr, splits, v_dim, weight, scratch);
  for (int d = threadIdx.x; d < v_dim; d += blockDim.x) {
    float o = 0.f;
    for (int s = 0; s < splits; ++s)
      if (weight[s] != 0.f) o += pr[s * (v_dim + 2) + 2 + d] * weight[s];
    out[static_cast<long>(blockIdx.x) * v_dim + d] = cuda::from_float<T>(denom > 0.f ? o / denom : 0.f);
  }
}

// The shapes the kernel is built for: (entries per lane, query heads per block).
struct Variant {
  int per_lane, heads;
};
Variant variant_for(const PagedKvLayout& l) {
  const int dim = l.qk_dim > l.v_dim ? l.qk_dim : l.v_dim;
  if (dim <= 128) return {4, 8};
  if (dim <= 256) return {8, 4};
  return {18, 4};  // MLA's 576-wide latent: 4 heads share each key's load (46 KB of shared memory)
}

// How many splits of the keys: enough blocks for two per multiprocessor, at least 32 keys a split.
int splits_for(int n_tokens, int q_heads, const PagedKvLayout& l, int max_context) {
  if (l.fixed_split_keys > 0) return std::min(kMaxSplits, std::max(1, (max_context + l.fixed_split_keys - 1) / l.fixed_split_keys));
  if (max_context <= 64) return 1;
  static int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 1;
  }();
  const int group = q_heads / l.kv_heads, heads = variant_for(l).heads;
  const long base = static_cast<long>(n_tokens) * l.kv_heads * ((group + heads - 1) / heads);
  const long want = (2L * sms + base - 1) / base, most = (max_context + 31) / 32;
  const long n = want < most ? want : most;
  return static_cast<int>(n < kMaxSplits ? n : kMaxSplits);
}

Status check_layout(const PagedKvLayout& l, const char* op) {
  const std::string name(op);
  if (l.dtype != DType::bf16 && l.dtype != DType::fp8_e4m3)
    return Error{name + ": the KV cache must be bf16 or fp8_e4m3, not " + dtype_name(l.dtype)};
  if (l.block_size <= 0 || l.kv_heads <= 0) return Error{name + ": block_size and kv_heads must be > 0"};
  if (l.qk_dim <= 0 || l.qk_dim > kMaxDim || l.v_dim <= 0 || l.v_dim > kMaxDim)
    return Error{name + ": qk_dim and v_dim must be in [1, 576]"};
  if (!(l.k_scale > 0.f) || !(l.v_scale > 0.f)) return Error{name + ": k_scale and v_scale must be > 0"};
  if (l.fixed_split_keys < 0 || l.fixed_split_keys % 32 != 0) return Error{name + ": fixed_split_keys must be a multiple of 32"};
  if (l.context_splits < 0 || l.context_splits > 1024) return Error{name + ": context_splits must be in [0, 1024]"};
  if (l.v_in_k && (l.v_dim > l.qk_dim || l.v_scale != l.k_scale))
    return Error{name + ": v_in_k needs v_dim <= qk_dim and v_scale == k_scale"};
  return {};
}

// Runs f(act_tag, kv_tag) for the activation type and the cache type.
template <class F>
Status with_types(DType act, DType kv, const char* op, F&& f) {
  return cuda::with_act_type(act, op, [&](auto a) {
    return kv == DType::bf16 ? f(a, cuda::bf16{}) : f(a, fp8{});
  });
}

}  // namespace

Status write_kv_cuda(DType act, const void* k, const void* v, int n_tokens, const std::int32_t* slot_mapping,
                          const PagedKvLayout& l, void* k_cache, void* v_cache, Stream stream) {
  if (Status bad = check_layout(l, "write_kv"); !bad) return bad;
  if (n_tokens < 0) return Error{"write_kv: n_tokens must be >= 0"};
  if (n_tokens == 0) return {};
  const long total = static_cast<long>(n_tokens) * l.kv_heads * (l.qk_dim + (l.v_in_k ? 0 : l.v_dim));
  const int blocks = static_cast<int>(std::min<long>((total + 255) / 256, 65536));
  return with_types(act, l.dtype, "write_kv", [&](auto a, auto c) {
    using T = decltype(a);
    using KV = decltype(c);
    write_kv_kernel<T, KV><<<blocks, 256, 0, stream>>>(static_cast<const T*>(k), static_cast<const T*>(v), n_tokens,
                                                       slot_mapping, l.kv_heads, l.qk_dim, l.v_dim,
                                                       static_cast<KV*>(k_cache), l.v_in_k ? nullptr : static_cast<KV*>(v_cache), l.k_scale,
                                                       l.v_scale);
    return TANDEM_CUDA_LAUNCHED("write_kv_kernel");
  });
}

size_t paged_attention_workspace_bytes(int n_tokens, int q_heads, const PagedKvLayout& l, int max_context) {
  if (!check_layout(l, "").ok() || q_heads <= 0 || n_tokens <= 0 || q_heads % l.kv_heads != 0) return 0;
  // Absorbed MLA may take the MLA decode kernel (bf16 activations), whose splits differ: room for either.
  const size_t mla_bytes =
      paged_attention_mla_fits(DType::bf16, n_tokens, q_heads, l) ? mla::workspace_bytes(n_tokens, q_heads, l, max_context) : 0;
  const int splits = splits_for(n_tokens, q_heads, l, max_context);
  if (splits == 1) return mla_bytes;
  return std::max<size_t>(mla_bytes, sizeof(float) * static_cast<size_t>(n_tokens) * static_cast<size_t>(q_heads) * static_cast<size_t>(splits) *
         static_cast<size_t>(l.v_dim + 2));
}

Status paged_attention_cuda(DType act, const void* q, int n_tokens, const std::int32_t* token_seq,
                                 const std::int32_t* token_pos, int q_heads, const PagedKvLayout& l,
                                 const void* k_cache, const void* v_cache, const std::int32_t* block_tables,
                                 int max_blocks_per_seq, float scale, void* out, int max_context, void* workspace,
                                 size_t workspace_bytes, Stream stream) {
  if (Status bad = check_layout(l, "paged_attention"); !bad) return bad;
  if (q_heads <= 0 || q_heads % l.kv_heads != 0) return Error{"paged_attention: q_heads must be a multiple of kv_heads"};
  if (n_tokens < 0 || max_blocks_per_seq <= 0) return Error{"paged_attention: n_tokens >= 0 and max_blocks_per_seq > 0"};
  if (n_tokens == 0) return {};
  if (mla::fits(act, n_tokens, q_heads, l, q, k_cache, out))
    return mla::attention(q, n_tokens, token_seq, token_pos, q_heads, l, k_cache, block_tables, max_blocks_per_seq, scale,
                          out, max_context, workspace, workspace_bytes, stream);
  int splits = splits_for(n_tokens, q_heads, l, max_context);
  if (splits > 1 && workspace_bytes < paged_attention_workspace_bytes(n_tokens, q_heads, l, max_context)) {
    if (workspace != nullptr) return Error{"paged_attention: workspace smaller than paged_attention_workspace_bytes"};
    splits = 1;  // no workspace given: one block walks all the keys
  }
  const int even = (max_context + splits - 1) / splits;  // the fixed split, unless kMaxSplits of it fall short
  const int per_split = splits == 1 ? 0 : l.fixed_split_keys > 0 ? std::max(l.fixed_split_keys, even) : even;
  const Variant v = variant_for(l);
  const int group = q_heads / l.kv_heads;
  const dim3 grid(static_cast<unsigned>(n_tokens * l.kv_heads * ((group + v.heads - 1) / v.heads)),
                  static_cast<unsigned>(splits));
  return with_types(act, l.dtype, "paged_attention", [&](auto a, auto c) {
    using T = decltype(a);
    using KV = decltype(c);
    auto launch = [&](auto kernel) {
      return cuda::launch_pdl(kernel, grid, dim3(kWarps * 32), 0, stream, static_cast<const T*>(q), token_seq, token_pos,
                              q_heads, l, static_cast<const KV*>(k_cache), static_cast<const KV*>(v_cache), block_tables,
                              max_blocks_per_seq, scale, per_split, static_cast<T*>(out), static_cast<float*>(workspace));
    };
    cudaError_t e;
    if (v.per_lane == 4) e = launch(paged_attention_kernel<T, KV, 4, 8>);
    else if (v.per_lane == 8) e = launch(paged_attention_kernel<T, KV, 8, 4>);
    else e = launch(paged_attention_kernel<T, KV, 18, 4>);
    if (auto err = TANDEM_CUDA_STATUS(e, "launch paged_attention_kernel"); !err || splits == 1) return err;
    return TANDEM_CUDA_STATUS(cuda::launch_pdl(combine_kernel<T>, dim3(static_cast<unsigned>(n_tokens * q_heads)), dim3(128), 0,
                                               stream, static_cast<const float*>(workspace), splits, l.v_dim, static_cast<T*>(out)),
                              "paged_attention combine_kernel");
  });
}

}  // namespace tandem::kernels
