// Mixture-of-experts routing as GLM-4.5 / DeepSeek-V3 do it ("noaux_tc"), for one token:
//   score[e]  = sigmoid(router_logit[e])
//   choice[e] = score[e] + correction_bias[e]          (the bias steers selection only)
//   a group of E / n_group experts is worth the sum of its two best choices; the best topk_group
//   groups stay, the experts of the others are out; the top_k best choices among the rest are chosen
//   (ties: lower index first), in order of choice
//   weight[i] = score[expert[i]]  (unbiased), / (sum of the top_k + 1e-20) when norm_topk_prob,
//               * routed_scaling_factor
// The CPU reference is what the model's MoE block (engine/model/src/ffn.cpp) calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

struct MoeRouting {
  int n_experts = 0;
  int n_group = 1;
  int topk_group = 1;
  int top_k = 0;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// Which settings are usable: Ok, or an Error naming the bad one.
// (E divisible by n_group, at least 2 experts per group, topk_group <= n_group, 1 <= top_k <= the
// experts in topk_group groups, E <= 1024.)
Status check_moe_routing(const MoeRouting& m);

// One token, from its sigmoid scores: top_k expert ids and weights.
void moe_route_cpu(const MoeRouting& m, const float* scores, const float* correction_bias, std::int32_t* expert,
                   float* weight);

// CUDA back end for `tokens` tokens from their router logits ([tokens, E] fp32): the sigmoid (taken
// in fp64 and rounded to fp32, like sigmoid_cpu) and the selection. One warp per token. expert and
// weight are [tokens, top_k]. All pointers are device buffers.
Status moe_route_cuda(const MoeRouting& m, const float* router_logits, const float* correction_bias, int tokens,
                           std::int32_t* expert, float* weight, Stream stream = nullptr);

// The router's logits and the routing in one launch, one block per token (for decode steps, where
// the separate router logits have a few warps' work): logits = x (fp32 [tokens, hidden]) .
// router^T (fp32 [E, hidden]) in fp32, then as moe_route_cuda. hidden must be a multiple of 8.
Status moe_router_route_cuda(const MoeRouting& m, const float* x, int hidden, const float* router,
                                  const float* correction_bias, int tokens, std::int32_t* expert, float* weight,
                                  Stream stream = nullptr);

// A decode step's post-attention residual add and RMSNorm folded in front of moe_router_route_cuda
// (one launch instead of two): x (fp32 [tokens, hidden], the residual stream) += delta (fp32);
// h = rmsnorm(x) * norm_w (bf16 norm_w and h, for the experts); the router takes the fp32
// normalised row. The sums run in the model's add_rmsnorm order (256 threads), so the numbers
// equal that kernel followed by moe_router_route_cuda on its fp32 output. It keeps the token's
// row and the routing scores in shared memory: a model takes it only where that fits (below).
// Each token gets a cluster of up to 8 blocks (sm_90 thread-block clusters) that split the router's
// rows between them, so the router is read at more than one SM's share of L2 bandwidth.
// CPU reference: the add, rmsnorm_cpu, linear_cpu, sigmoid_cpu and moe_route_cpu.
Status moe_norm_router_route_cuda(const MoeRouting& m, float* x, const float* delta, const void* norm_w, float eps,
                                       int hidden, const float* router, const float* correction_bias, int tokens, void* h,
                                       std::int32_t* expert, float* weight, Stream stream = nullptr);

// Shared memory of each moe_norm_router_route_cuda block: the row (hidden floats), logits, scores
// and chosen scores (3 E floats), the group scores (n_group floats) and E taken-flags.
constexpr std::size_t moe_norm_router_route_smem(int hidden, int n_experts, int n_group) {
  return sizeof(float) * (static_cast<std::size_t>(hidden) + 3 * static_cast<std::size_t>(n_experts) + static_cast<std::size_t>(n_group)) +
         static_cast<std::size_t>(n_experts);
}
// Whether that fits the 48 KiB a launch gets without opting in, less the kernel's 128 bytes of
// static shared memory (its block-reduction partials): about hidden + 3.25 E <= 12256.
constexpr bool moe_norm_router_route_fits(int hidden, int n_experts, int n_group) {
  return moe_norm_router_route_smem(hidden, n_experts, n_group) + 32 * sizeof(float) <= 48 * 1024;
}

}  // namespace tandem::kernels
