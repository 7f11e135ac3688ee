// Checkpoint tensor names, one table per architecture (as llama.cpp keeps them): a loader asks for
// a tensor by what it is, and how a checkpoint family spells it lives in one place. The CPU
// loaders and the CUDA loaders read the same tables, so they cannot disagree on a name.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace tandem::model::detail {

// What a tensor is. Per layer unless said otherwise; experts are numbered within their layer.
enum class Tensor : std::uint8_t {
  embed, final_norm, lm_head,  // the model's, not a layer's
  input_norm, post_attention_norm,
  // attention with separate heads (GQA: glm4_moe)
  q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm,
  // latent attention (MLA: glm4_moe_lite, glm5_next's sparse layers)
  q_a, q_a_bias, q_a_norm, q_b, kv_a, kv_a_bias, kv_a_norm, kv_b,
  // the sparse layers' lightning indexer (DSA: glm5_next)
  index_wq_b, index_wk, index_k_norm, index_k_norm_bias, index_weights, index_kpool_ape, index_kpool_gate,
  // linear attention (KDA: glm5_next)
  kda_q, kda_k, kda_v, kda_conv, kda_f_a, kda_f_b, kda_dt_bias, kda_a_log, kda_b, kda_g_a, kda_g_b, kda_o_norm, kda_o,
  // hyper-connections around attention and around the feed-forward block (glm5_next)
  attn_hc_fn, attn_hc_base, attn_hc_scale, ffn_hc_fn, ffn_hc_base, ffn_hc_scale,
  // MLP: a dense layer's, and a MoE layer's shared experts (one MLP of n times the width)
  mlp_gate, mlp_up, mlp_down, shared_gate, shared_up, shared_down,
  // MoE routing and the routed experts, one tensor per expert or fused (transformers' in-memory layout)
  router, router_bias, expert_gate, expert_up, expert_down, experts_gate_up, experts_down,
  count
};

// One architecture's table. Patterns hold {R} (the text stack's root, "model."), {L} (the layer)
// and {E} (the expert).
class TensorNames {
 public:
  // The name of `t` (in `layer`, for `expert`). A tensor this architecture does not have is a
  // programming error: it gives "" and the checkpoint lookup then fails naming nothing found.
  std::string operator()(Tensor t, int layer = -1, int expert = -1) const;

  // The same table with another root: glm5_next's multimodal wrapper keeps its text stack under
  // "model.language_model.".
  TensorNames with_root(std::string root) const;

  // The tables. glm4_moe_lite and glm4_moe share their MLP/MoE names and differ in attention;
  // glm5_next has both kinds of attention layer.
  static const TensorNames& glm4_moe_lite();
  static const TensorNames& glm4_moe();
  static const TensorNames& glm5_next();

 private:
  using Patterns = const std::string_view*;  // indexed by Tensor, Tensor::count entries
  TensorNames(Patterns patterns, std::string root) : patterns_(patterns), root_(std::move(root)) {}
  Patterns patterns_;
  std::string root_;
};

}  // namespace tandem::model::detail
