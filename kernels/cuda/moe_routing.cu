// MoE routing, one warp per token: sigmoid, biased choice, groups worth their top 2, the best
// groups, then top_k rounds of a warp-wide argmax (ties: lower index, as the CPU's sort order).
// Per warp, shared memory holds the token's scores, choices and a taken-flag per expert.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/launch.hpp"
#include "tandem/kernels/moe_routing.hpp"

namespace tandem::kernels {
namespace {

constexpr int kWarps = 4;

struct Best {
  float v;
  int i;
};
__device__ __forceinline__ bool better(float v, int i, const Best& b) { return v > b.v || (v == b.v && i < b.i); }

// The best untaken entry of vals[0..n) over the warp; every lane gets it.
__device__ Best warp_argmax(const float* vals, const unsigned char* taken, int n) {
  const int lane = threadIdx.x % 32;
  Best b{-INFINITY, 0x7fffffff};
  for (int e = lane; e < n; e += 32)
    if (!taken[e] && better(vals[e], e, b)) b = {vals[e], e};
  for (int o = 16; o > 0; o /= 2) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    if (better(other.v, other.i, b)) b = other;
  }
  return b;
}

// One warp routes one token from its logits row; score, choice (E each), group_score (G) and
// taken (E bytes) are the warp's shared-memory scratch.
__device__ void route_token(const MoeRouting& m, const float* logits, const float* bias, int token, float* score,
                            float* choice, float* group_score, unsigned char* taken, std::int32_t* expert, float* weight) {
  const int lane = threadIdx.x % 32;
  const int E = m.n_experts, G = m.n_group, per_group = E / G;
  for (int e = lane; e < E; e += 32) {
    const double x = logits[e];
    score[e] = static_cast<float>(1.0 / (1.0 + exp(-x)));  // as sigmoid_cpu: fp64, rounded once
    choice[e] = score[e] + bias[e];
    taken[e] = 0;
  }
  __syncwarp();
  // Every group kept (GLM-4.7-Flash: one group, topk_group 1): no group scores, no masking; the
  // choice is the same, without a lane's serial walk over the experts.
  const bool all_groups = m.topk_group >= G;
  for (int g = lane; g < G && !all_groups; g += 32) {
    float first = -INFINITY, second = -INFINITY;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (choice[e] > first) {
        second = first;
        first = choice[e];
      } else if (choice[e] > second) {
        second = choice[e];
      }
    }
    group_score[g] = first + second;
  }
  __syncwarp();
  // The best topk_group groups; `taken` marks them for now.
  if (!all_groups) {
    for (int r = 0; r < m.topk_group; ++r) {
      const Best b = warp_argmax(group_score, taken, G);
      if (lane == 0) taken[b.i] = 1;
      __syncwarp();
    }
    for (int e = lane; e < E; e += 32)
      if (!taken[e / per_group]) choice[e] = -INFINITY;  // reads group flags before any lane resets them
    __syncwarp();
    for (int e = lane; e < E; e += 32) taken[e] = 0;
    __syncwarp();
  }
  // top_k experts in order of choice; lane 0 keeps the running sum in the CPU's order.
  float sum = 0.f;
  for (int r = 0; r < m.top_k; ++r) {
    const Best b = warp_argmax(choice, taken, E);
    if (lane == 0) {
      taken[b.i] = 1;
      expert[static_cast<long>(token) * m.top_k + r] = b.i;
      weight[static_cast<long>(token) * m.top_k + r] = score[b.i];
      sum += score[b.i];
    }
    __syncwarp();
  }
  if (lane == 0)
    for (int r = 0; r < m.top_k; ++r) {
      float& w = weight[static_cast<long>(token) * m.top_k + r];
      if (m.norm_topk_prob) w /= sum + 1e-20f;
      w *= m.routed_scaling_factor;
    }
}

__global__ void moe_route_kernel(MoeRouting m, const float* logits, const float* bias, int tokens, std::int32_t* expert,
                                 float* weight) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, token = blockIdx.x * kWarps + warp;
  const int E = m.n_experts, G = m.n_group;
  float* score = smem + warp * (2 * E + G);
  unsigned char* taken = reinterpret_cast<unsigned char*>(smem + kWarps * (2 * E + G)) + warp * E;
  if (token >= tokens) return;  // whole warps leave together
  route_token(m, logits + static_cast<long>(token) * E, bias, token, score, score + E, score + 2 * E, taken, expert, weight);
}

// One expert's router logit of an fp32 row, by a warp (16-byte loads of the row and the router;
// every lane gets the sum). The fused and the unfused router sum in this one order, so they agree.
// Unrolled 8 deep: a 2048-wide row's 16 loads a lane are all in flight at once (one memory
// latency, not two); the additions keep their order.
__device__ __forceinline__ float router_dot(const float* x, const float* we, int hidden, int lane) {
  float s = 0.f;
#pragma unroll 8
  for (int c = lane * 8; c < hidden; c += 32 * 8) {
    const float4 x0 = *reinterpret_cast<const float4*>(x + c), x1 = *reinterpret_cast<const float4*>(x + c + 4);
    const float4 w0 = *reinterpret_cast<const float4*>(we + c), w1 = *reinterpret_cast<const float4*>(we + c + 4);
    s += x0.x * w0.x + x0.y * w0.y + x0.z * w0.z + x0.w * w0.w + x1.x * w1.x + x1.y * w1.y + x1.z * w1.z + x1.w * w1.w;
  }
  return cuda::warp_sum(s);
}

// The block's warps take the experts' router logits of one token's fp32 row in turn (16-byte
// loads of the row and the router), into shared memory; then warp 0 routes. Shared by the router
// kernels, whatever made the row.
__device__ void logits_then_route(const MoeRouting& m, const float* xt, int hidden, const float* router, const float* bias,
                                  int token, float* logits, float* score, unsigned char* taken, std::int32_t* expert,
                                  float* weight) {
  const int E = m.n_experts, warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int e = warp; e < E; e += warps) {
    const float s = router_dot(xt, router + static_cast<long>(e) * hidden, hidden, lane);
    if (lane == 0) logits[e] = s;
  }
  __syncthreads();
  if (warp == 0) route_token(m, logits, bias, token, score, score + E, score + 2 * E, taken, expert, weight);
}

// One block per token: the router's logits of its fp32 row, then its routing.
__global__ void router_route_kernel(MoeRouting m, const float* x, int hidden, const float* router, const float* bias,
                                    std::int32_t* expert, float* weight) {
  const int E = m.n_experts, G = m.n_group, token = blockIdx.x;
  // The router's rows are constant: ask L2 for them before waiting for x's kernel (programmatic launch).
  if (token == 0)
    for (long b = 128L * threadIdx.x; b < 4L * E * hidden; b += 128L * blockDim.x)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(router) + b));
  cuda::pdl_begin();
  extern __shared__ float smem[];
  float* logits = smem;
  float* score = smem + E;
  unsigned char* taken = reinterpret_cast<unsigned char*>(score + 2 * E + G);
  const float* xt = x + static_cast<long>(token) * hidden;
  logits_then_route(m, xt, hidden, router, bias, token, logits, score, taken, expert, weight);
}

// moe_norm_router_route_cuda: add_rmsnorm's residual add and norm (256 threads in its order, so
// the numbers are the same), then the router's logits spread over a cluster of blocks per token.
// Why a cluster: one block reading the whole router (E rows of hidden fp32: 512 KB for 64 x 2048)
// is bound by one SM's share of L2 bandwidth (several microseconds a layer at batch 1); a cluster
// of up to 8 blocks reads it 8 ways and hands the logits to its first block through distributed
// shared memory, with no global scratch nor extra launch. Every block normalises the row itself
// (16 bytes per entry from L2, a fraction of the router's bytes); each expert's logit is one warp's
// sum in the order of logits_then_route, so the result is the same as one block's.
constexpr int kNormThreads = 256, kClusterMax = 8;

int norm_router_cluster(int n_experts) { return std::min(kClusterMax, (n_experts + kNormThreads / 32 - 1) / (kNormThreads / 32)); }

// The row pieces of norm_router_route_kernel, each issuing a round of kBatch entries' loads before
// its stores (which the compiler must take as possibly aliasing them): one memory latency a round,
// not one an entry. Entries first, first + stride, ..; every sum in add_rmsnorm_kernel's order.
constexpr int kBatch = 8;

// xs = xr + dr; returns this thread's sum of squares.
__device__ __forceinline__ float add_rows(const float* xr, const float* dr, int hidden, float* xs, int first, int stride) {
  float s = 0.f;
  for (int i0 = first; i0 < hidden; i0 += kBatch * stride) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * stride;
      v[j] = i < hidden ? xr[i] + dr[i] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * stride;
      if (i < hidden) xs[i] = v[j], s += v[j] * v[j];
    }
  }
  return s;
}

// xs = xs * r * norm_w, and also into hr (bf16) unless it is null.
__device__ __forceinline__ void normalise_row(float* xs, int hidden, float r, const cuda::bf16* norm_w, cuda::bf16* hr) {
  for (int i0 = threadIdx.x; i0 < hidden; i0 += kBatch * kNormThreads) {
    float g[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kNormThreads;
      g[j] = i < hidden ? __bfloat162float(norm_w[i]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = i0 + j * kNormThreads;
      if (i >= hidden) break;
      const float v = xs[i] * r * g[j];
      if (hr) hr[i] = __float2bfloat16_rn(v);
      xs[i] = v;
    }
  }
}

// Grid (cluster blocks, tokens), cluster (cluster blocks, 1, 1), 256 threads.
__global__ void __launch_bounds__(kNormThreads) norm_router_route_kernel(MoeRouting m, float* x, const float* delta,
                                                                          const cuda::bf16* norm_w, float eps, int hidden,
                                                                          const float* router, const float* bias, cuda::bf16* h,
                                                                          std::int32_t* expert, float* weight) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int E = m.n_experts, G = m.n_group, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int token = blockIdx.y, rank = static_cast<int>(cluster.block_rank()), blocks = static_cast<int>(cluster.num_blocks());
  constexpr int kWarps = kNormThreads / 32;
  // This block's experts: rank * 8 + warp, then every 8 * blocks. Their router rows are constant:
  // ask L2 for them before waiting for delta's kernel (programmatic launch).
  if (token == 0)
    for (int e0 = rank * kWarps; e0 < E; e0 += kWarps * blocks) {
      const long first = static_cast<long>(e0) * hidden * 4, bytes = static_cast<long>(min(kWarps, E - e0)) * hidden * 4;
      for (long b = 128L * threadIdx.x; b < bytes; b += 128L * kNormThreads)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(router) + first + b));
    }
  cuda::pdl_begin();
  extern __shared__ float smem[];
  __shared__ float part[32];
  float* xs = smem;  // the token's row: x + delta, then normalised
  float* logits = smem + hidden;
  float* score = logits + E;
  unsigned char* taken = reinterpret_cast<unsigned char*>(score + 2 * E + G);
  float* xr = x + static_cast<long>(token) * hidden;
  const float* dr = delta + static_cast<long>(token) * hidden;
  float s = add_rows(xr, dr, hidden, xs, threadIdx.x, kNormThreads);
  s = cuda::warp_sum(s);
  if (lane == 0) part[warp] = s;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < kWarps; ++i) total += part[i];
  const float r = rsqrtf(total / static_cast<float>(hidden) + eps);
  normalise_row(xs, hidden, r, norm_w, rank == 0 ? h + static_cast<long>(token) * hidden : nullptr);
  __syncthreads();
  float* logits0 = cluster.map_shared_rank(logits, 0);  // the first block's logits
  for (int e = rank * kWarps + warp; e < E; e += kWarps * blocks) {
    const float d = router_dot(xs, router + static_cast<long>(e) * hidden, hidden, lane);
    if (lane == 0) logits0[e] = d;
  }
  // Every block has read x and delta and written its logits: the first block may update x in place.
  cluster.sync();
  if (rank != 0) return;
  if (warp == 0) {
    route_token(m, logits, bias, token, score, score + E, score + 2 * E, taken, expert, weight);
  } else {
    // The same fp32 add as above, now into x itself (the sums are not needed again).
    add_rows(xr, dr, hidden, xr, threadIdx.x - 32, kNormThreads - 32);
  }
#endif
}

}  // namespace

Status moe_router_route_cuda(const MoeRouting& m, const float* x, int hidden, const float* router,
                                  const float* correction_bias, int tokens, std::int32_t* expert, float* weight,
                                  Stream stream) {
  if (auto bad = check_moe_routing(m); !bad) return bad.error().with_context("moe_router_route");
  if (tokens < 0 || hidden <= 0 || hidden % 8 != 0) return Error{"moe_router_route: tokens >= 0 and hidden a multiple of 8"};
  if (tokens == 0) return {};
  const int E = m.n_experts, threads = E >= 32 ? 1024 : E * 32;  // a warp per expert, up to 32 warps
  const size_t smem = sizeof(float) * (3 * static_cast<size_t>(E) + static_cast<size_t>(m.n_group)) + static_cast<size_t>(E);
  return TANDEM_CUDA_STATUS(cuda::launch_pdl(router_route_kernel, dim3(static_cast<unsigned>(tokens)), dim3(static_cast<unsigned>(threads)),
                                         smem, stream, m, x, hidden, router,
                                         correction_bias, expert, weight),
                        "router_route_kernel");
}

Status moe_route_cuda(const MoeRouting& m, const float* router_logits, const float* correction_bias, int tokens,
                           std::int32_t* expert, float* weight, Stream stream) {
  if (auto bad = check_moe_routing(m); !bad) return bad.error().with_context("moe_route");
  if (tokens < 0) return Error{"moe_route: tokens must be >= 0"};
  if (tokens == 0) return {};
  const size_t smem = kWarps * (sizeof(float) * (2 * static_cast<size_t>(m.n_experts) + static_cast<size_t>(m.n_group)) +
                                static_cast<size_t>(m.n_experts));
  moe_route_kernel<<<(tokens + kWarps - 1) / kWarps, kWarps * 32, smem, stream>>>(m, router_logits, correction_bias,
                                                                                tokens, expert, weight);
  return TANDEM_CUDA_LAUNCHED("moe_route_kernel");
}

Status moe_norm_router_route_cuda(const MoeRouting& m, float* x, const float* delta, const void* norm_w, float eps,
                                       int hidden, const float* router, const float* correction_bias, int tokens, void* h,
                                       std::int32_t* expert, float* weight, Stream stream) {
  if (auto bad = check_moe_routing(m); !bad) return bad.error().with_context("moe_norm_router_route");
  if (tokens < 0 || hidden <= 0 || hidden % 8 != 0) return Error{"moe_norm_router_route: tokens >= 0 and hidden a multiple of 8"};
  if (tokens == 0) return {};
  if (!moe_norm_router_route_fits(hidden, m.n_experts, m.n_group))
    return Error{"moe_norm_router_route: hidden too large for the row in shared memory (take add_rmsnorm, then moe_router_route)"};
  // A cluster of blocks per token (norm_router_route_kernel), launched programmatically where on.
  const int blocks = norm_router_cluster(m.n_experts);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(tokens));
  cfg.blockDim = dim3(kNormThreads), cfg.dynamicSmemBytes = moe_norm_router_route_smem(hidden, m.n_experts, m.n_group);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(blocks), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr, cfg.numAttrs = programmatic_launch() ? 2 : 1;
  return TANDEM_CUDA_STATUS(cudaLaunchKernelEx(&cfg, norm_router_route_kernel, m, x, delta, static_cast<const cuda::bf16*>(norm_w), eps,
                                               hidden, router, correction_bias, static_cast<cuda::bf16*>(h), expert, weight),
                        "norm_router_route_kernel");
}

}  // namespace tandem::kernels
