// The routed experts (and the shared experts) of a MoE block for a few tokens (decode), in two
// launches that read only the chosen experts' rows, where the grouped path (moe_experts.hpp) takes
// six (gate_up, activation, down, the shared MLP's three, the combine):
//   moe_decode_gate_up   act[t][j] = silu(G_j x[t]) * (U_j x[t]) for each of token t's top_k
//                        experts j (and, as slot top_k, the shared experts)
//   moe_decode_down      out[t] = sum_j weight[t][j] * D_j act[t][j]  (+ D_shared act[t][top_k])
// One warp per output row, 16-byte weight loads, fp32 sums; act is bf16 as the grouped path stores
// it. Per pair (one token, one of its experts) each pair reads its expert's rows; with a `groups`
// workspace and two or more tokens, grouped (moe_decode_grouped.cu): each chosen expert's rows are
// read once per launch and applied to every token routed to it, with each token's sums taken in
// the per-pair kernels' order, so a token's output is the same bits either way and whatever other
// tokens share the step (batch invariance; gpu_check compares the two bit for bit).
// CPU reference: linear_cpu, silu_and_mul_cpu and the weighted sum (ffn.cpp's MoE block).
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

constexpr int kMoeDecodeTokens = 4;

struct MoeDecodeArgs {
  int tokens = 0, top_k = 0, hidden = 0;
  int width = 0;                          // moe_intermediate_size
  const void* x = nullptr;                // [tokens, hidden] bf16
  const std::int32_t* expert = nullptr;   // [tokens, top_k]
  const float* weight = nullptr;          // [tokens, top_k]
  const void* gate_up = nullptr;          // [E, 2 * width, hidden]: gate rows, then up rows
  const void* down = nullptr;             // [E, hidden, width]
  const void* shared_gate_up = nullptr;   // [2 * shared_width, hidden] or nullptr
  const void* shared_down = nullptr;      // [hidden, shared_width]
  int shared_width = 0;                   // 0: no shared experts
  void* act = nullptr;                    // [tokens, top_k + 1, max(width, shared_width)] bf16 workspace
  float* out = nullptr;                   // [tokens, hidden] fp32
  // The grouped form's workspace (moe_decode_group_ints(experts, top_k, tokens) int32s, written by
  // the launch itself: the token list of each expert). nullptr: per pair.
  int experts = 0;                        // E, the stack's routed experts
  std::int32_t* groups = nullptr;
};

// The int32s of the grouped form's workspace for up to `tokens` tokens.
long moe_decode_group_ints(int experts, int top_k, int tokens);

// hidden, width and shared_width multiples of 8; weights 16-byte aligned.
bool moe_decode_fits(const MoeDecodeArgs& a);

// Whether a launch of these args takes the grouped form (groups set, two or more tokens, the
// shapes it holds: hidden <= 2048, top_k <= 32, an expert row per block within shared memory).
bool moe_decode_groups(const MoeDecodeArgs& a);

Status moe_decode_cuda(const MoeDecodeArgs& a, Stream stream = nullptr);

}  // namespace tandem::kernels
