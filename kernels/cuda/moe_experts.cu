// Router logits, the expert sort, the grouped expert GEMM and the weighted combine (moe_experts.hpp).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common.cuh"
#include "grouped_mma.cuh"
#include "grouped_wgmma.hpp"
#include "quant_tiles.cuh"
#include "rows_gemv.cuh"
#include "tandem/kernels/moe_experts.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;

// One warp per (token, expert); x bf16 or fp32.
template <class X>
__global__ void router_logits_kernel(const X* x, int tokens, int hidden, const float* router, int E, float* logits) {
  const long warp = (blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<long>(tokens) * E) return;
  const long t = warp / E, e = warp % E;
  const X* xt = x + t * hidden;
  const float* we = router + e * hidden;
  float s = 0.f;
  for (int i = lane; i < hidden; i += 32) s += cuda::to_float(xt[i]) * we[i];
  s = cuda::warp_sum(s);
  if (lane == 0) logits[warp] = s;
}

// One block: count pairs per expert, scan, scatter. Order inside an expert is the atomics' order,
// which changes nothing: every pair's product is computed on its own.
__global__ void moe_sort_kernel(const std::int32_t* expert, int pairs, int top_k, int first, int E,
                                std::int32_t* offsets, std::int32_t* sorted_token, std::int32_t* pair_pos) {
  __shared__ int count[1024], cursor[1024];
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = expert[i] - first;
    if (e >= 0 && e < E) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = run;
      cursor[e] = run;
      run += count[e];
    }
    offsets[E] = run;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = expert[i] - first;
    if (e < 0 || e >= E) {
      pair_pos[i] = -1;
      continue;
    }
    const int p = atomicAdd(&cursor[e], 1);
    sorted_token[p] = i / top_k;
    pair_pos[i] = p;
  }
}

template <class T>
__global__ void moe_combine_kernel(const bf16* y, const std::int32_t* pair_pos, const float* weight, int top_k,
                                   int hidden, const T* add, T* out) {
  const int t = blockIdx.x;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
    float s = add ? cuda::to_float(add[static_cast<long>(t) * hidden + h]) : 0.f;
    for (int i = 0; i < top_k; ++i) {
      const int p = pair_pos[t * top_k + i];
      if (p >= 0) s += weight[t * top_k + i] * __bfloat162float(y[static_cast<long>(p) * hidden + h]);
    }
    out[static_cast<long>(t) * hidden + h] = cuda::from_float<T>(s);
  }
}

// moe_combine_kernel eight outputs a thread, for rows of whole 16-byte units (hidden % 8 == 0, the
// buffers aligned): a token's pair positions and weights read once, its top_k rows of y in flight
// together. Each output's sum is moe_combine_kernel's, term by term in the same order (the bits).
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const bf16* e = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __bfloat162float(e[j]);
  }
}

template <class T>
__global__ void moe_combine8_kernel(const bf16* y, const std::int32_t* pair_pos, const float* weight, int top_k, int hidden, const T* add,
                                    T* out) {
  const int t = blockIdx.x, h0 = (static_cast<int>(blockIdx.y * blockDim.x) + static_cast<int>(threadIdx.x)) * 8;
  if (h0 >= hidden) return;
  float s[8];
  if (add) {
    load8(add + static_cast<long>(t) * hidden + h0, s);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j] = 0.f;
  }
  for (int i = 0; i < top_k; ++i) {
    const int p = pair_pos[t * top_k + i];
    if (p < 0) continue;
    const float w = weight[t * top_k + i];
    float v[8];
    load8(y + static_cast<long>(p) * hidden + h0, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j] += w * v[j];
  }
  T* o = out + static_cast<long>(t) * hidden + h0;
  if constexpr (sizeof(T) == 4) {
    reinterpret_cast<float4*>(o)[0] = make_float4(s[0], s[1], s[2], s[3]);
    reinterpret_cast<float4*>(o)[1] = make_float4(s[4], s[5], s[6], s[7]);
  } else {
    *reinterpret_cast<uint4*>(o) = make_uint4(cuda::pack_bf16(s[0], s[1]), cuda::pack_bf16(s[2], s[3]), cuda::pack_bf16(s[4], s[5]),
                                              cuda::pack_bf16(s[6], s[7]));
  }
}

// The combine's launch: eight outputs a thread where every row is whole 16-byte units.
template <class T>
void launch_combine(const bf16* y, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k, int hidden, const T* add, T* out,
                    Stream stream) {
  auto aligned = [](const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; };
  if (hidden % 8 == 0 && aligned(y) && aligned(out) && (!add || aligned(add))) {
    const int units = hidden / 8, threads = std::min(256, (units + 31) / 32 * 32);
    const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((units + threads - 1) / threads));
    moe_combine8_kernel<T><<<grid, threads, 0, stream>>>(y, pair_pos, weight, top_k, hidden, add, out);
  } else {
    moe_combine_kernel<T><<<tokens, 256, 0, stream>>>(y, pair_pos, weight, top_k, hidden, add, out);
  }
}

}  // namespace

Status router_logits_cuda(const void* x, int tokens, int hidden, const float* router, int n_experts, float* logits,
                               Stream stream) {
  if (tokens < 0 || hidden <= 0 || n_experts <= 0) return Error{"router_logits: bad shape"};
  if (tokens == 0) return {};
  const long threads = static_cast<long>(tokens) * n_experts * 32;
  router_logits_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
      static_cast<const bf16*>(x), tokens, hidden, router, n_experts, logits);
  return TANDEM_CUDA_LAUNCHED("router_logits_kernel");
}

Status router_logits_f32_cuda(const float* x, int tokens, int hidden, const float* router, int n_experts, float* logits,
                                   Stream stream) {
  if (tokens < 0 || hidden <= 0 || n_experts <= 0) return Error{"router_logits: bad shape"};
  if (tokens == 0) return {};
  const long threads = static_cast<long>(tokens) * n_experts * 32;
  router_logits_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(x, tokens, hidden, router, n_experts,
                                                                                       logits);
  return TANDEM_CUDA_LAUNCHED("router_logits_kernel (fp32 input)");
}

Status moe_sort_cuda(const std::int32_t* expert, int tokens, int top_k, int first_expert, int n_experts,
                          std::int32_t* offsets, std::int32_t* sorted_token, std::int32_t* pair_pos, Stream stream) {
  if (n_experts <= 0 || n_experts > 1024 || top_k <= 0 || tokens < 0) return Error{"moe_sort: bad shape"};
  moe_sort_kernel<<<1, 1024, 0, stream>>>(expert, tokens * top_k, top_k, first_expert, n_experts, offsets, sorted_token,
                                          pair_pos);
  return TANDEM_CUDA_LAUNCHED("moe_sort_kernel");
}

namespace {

// The shape rules of the grouped GEMM's entry points (grouped_gemm_cuda, grouped_gemm_silu_cuda);
// `what` names the entry point in the message.
Status check_grouped(const char* what, int n, int k, long ldx, int n_experts) {
  const std::string at = std::string(what) + ": ";
  if (n <= 0 || k <= 0 || n_experts <= 0)
    return Error{at + "bad shape (n " + std::to_string(n) + ", k " + std::to_string(k) + ", experts " +
                 std::to_string(n_experts) + ")"};
  if (k % 8 != 0 || ldx % 8 != 0)
    return Error{at + "k and ldx must be multiples of 8, got " + std::to_string(k) + " and " + std::to_string(ldx)};
  if (n_experts > 65535) return Error{at + "at most 65535 experts, got " + std::to_string(n_experts)};
  return {};
}

}  // namespace

Status grouped_gemm_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets,
                              int n_experts, const void* w, int n, int k, void* y, long ldy, Stream stream, GroupedForm form,
                              WgmmaTile tile) {
  if (Status s = check_grouped("grouped_gemm", n, k, ldx, n_experts); !s) return s;
  if (form == GroupedForm::wgmma) return grouped_wgmma_cuda(x, ldx, gather, offsets, n_experts, w, n, k, y, ldy, stream, tile, false);
  if (form == GroupedForm::mma) {
    grouped_mma::launch(x, ldx, gather, offsets, n_experts, grouped_mma::Bf16Tiles{static_cast<const bf16*>(w), n, k, {}}, n, k, y,
                        ldy, stream);
    return TANDEM_CUDA_LAUNCHED("grouped_mma_kernel");
  }
  const dim3 grid(static_cast<unsigned>((n + gemv::kRowsPerBlock - 1) / gemv::kRowsPerBlock), static_cast<unsigned>(n_experts));
  gemv::rows_gemv_kernel<bf16><<<grid, gemv::kWarps * 32, 0, stream>>>(static_cast<const bf16*>(x), ldx, gather, offsets, 0,
                                                                      static_cast<const bf16*>(w), n, k, nullptr,
                                                                      static_cast<bf16*>(y), ldy);
  return TANDEM_CUDA_LAUNCHED("grouped_gemm_kernel");
}

Status grouped_gemm_silu_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                              const void* w, int d, int k, void* y, long ldy, Stream stream, WgmmaTile tile) {
  if (Status s = check_grouped("grouped_gemm_silu", d, k, ldx, n_experts); !s) return s;
  if (d % 2 != 0) return Error{"grouped_gemm_silu: d (gate and up rows) must be even, got " + std::to_string(d)};
  if (!offsets) return Error{"grouped_gemm_silu: offsets are required"};
  return grouped_wgmma_cuda(x, ldx, gather, offsets, n_experts, w, d, k, y, ldy, stream, tile, true);
}

Status grouped_gemm_quant_cuda(const void* x, long ldx, const std::int32_t* gather, const std::int32_t* offsets, int n_experts,
                               const QuantMatrices& w, void* y, long ldy, Stream stream) {
  if (n_experts <= 0 || n_experts > 65535 || w.count <= 0 || w.count % n_experts != 0 || w.rows <= 0)
    return Error{"grouped_gemm_quant: " + std::to_string(w.count) + " matrices do not split evenly over " + std::to_string(n_experts) +
                 " experts (at most 65535)"};
  if (w.in <= 0 || w.in % 16 != 0 || ldx % 8 != 0)
    return Error{"grouped_gemm_quant: inputs must be a multiple of 16 and ldx of 8, got " + std::to_string(w.in) + " and " +
                 std::to_string(ldx)};
  if (!w.data || !w.scales || (w.format == QuantFormat::nvfp4 && !w.global) || reinterpret_cast<std::uintptr_t>(w.data) % 16 != 0)
    return Error{"grouped_gemm_quant: a stack without its data (16-byte aligned), scales or global scales"};
  const int per = w.count / n_experts, n = per * w.rows;
  if (w.format == QuantFormat::fp8_block)
    grouped_mma::launch(x, ldx, gather, offsets, n_experts, grouped_mma::QuantTiles<QuantFormat::fp8_block>{w, per, n, w.in, {}, {}, {}},
                        n, w.in, y, ldy, stream);
  else
    grouped_mma::launch(x, ldx, gather, offsets, n_experts, grouped_mma::QuantTiles<QuantFormat::nvfp4>{w, per, n, w.in, {}, {}, {}}, n,
                        w.in, y, ldy, stream);
  return TANDEM_CUDA_LAUNCHED("grouped_mma_kernel (quantised weights)");
}

Status moe_combine_cuda(const void* y, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                             int hidden, const void* add, void* out, Stream stream) {
  if (tokens < 0 || top_k <= 0 || hidden <= 0) return Error{"moe_combine: bad shape"};
  if (tokens == 0) return {};
  launch_combine(static_cast<const bf16*>(y), pair_pos, weight, tokens, top_k, hidden, static_cast<const bf16*>(add), static_cast<bf16*>(out),
                 stream);
  return TANDEM_CUDA_LAUNCHED("moe_combine_kernel");
}

Status moe_combine_f32_cuda(const void* y, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                                 int hidden, const float* add, float* out, Stream stream) {
  if (tokens < 0 || top_k <= 0 || hidden <= 0) return Error{"moe_combine: bad shape"};
  if (tokens == 0) return {};
  launch_combine(static_cast<const bf16*>(y), pair_pos, weight, tokens, top_k, hidden, add, out, stream);
  return TANDEM_CUDA_LAUNCHED("moe_combine_kernel (fp32 out)");
}

}  // namespace tandem::kernels
