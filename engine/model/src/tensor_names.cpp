#include "tensor_names.hpp"

#include <array>
#include <initializer_list>
#include <utility>

namespace tandem::model::detail {

namespace {

using T = Tensor;
using Entry = std::pair<Tensor, std::string_view>;
constexpr std::size_t kCount = static_cast<std::size_t>(Tensor::count);
using Table = std::array<std::string_view, kCount>;

// Every GLM decoder's: embedding, norms, head, and the MLP / MoE block under "mlp.".
constexpr Entry kDecoder[] = {
    {T::embed, "{R}embed_tokens.weight"},
    {T::final_norm, "{R}norm.weight"},
    {T::lm_head, "lm_head.weight"},
    {T::input_norm, "{R}layers.{L}.input_layernorm.weight"},
    {T::post_attention_norm, "{R}layers.{L}.post_attention_layernorm.weight"},
    {T::mlp_gate, "{R}layers.{L}.mlp.gate_proj.weight"},
    {T::mlp_up, "{R}layers.{L}.mlp.up_proj.weight"},
    {T::mlp_down, "{R}layers.{L}.mlp.down_proj.weight"},
    {T::shared_gate, "{R}layers.{L}.mlp.shared_experts.gate_proj.weight"},
    {T::shared_up, "{R}layers.{L}.mlp.shared_experts.up_proj.weight"},
    {T::shared_down, "{R}layers.{L}.mlp.shared_experts.down_proj.weight"},
    {T::router, "{R}layers.{L}.mlp.gate.weight"},
    {T::router_bias, "{R}layers.{L}.mlp.gate.e_score_correction_bias"},
    {T::expert_gate, "{R}layers.{L}.mlp.experts.{E}.gate_proj.weight"},
    {T::expert_up, "{R}layers.{L}.mlp.experts.{E}.up_proj.weight"},
    {T::expert_down, "{R}layers.{L}.mlp.experts.{E}.down_proj.weight"},
    {T::experts_gate_up, "{R}layers.{L}.mlp.experts.gate_up_proj"},
    {T::experts_down, "{R}layers.{L}.mlp.experts.down_proj"},
};

// Multi-head latent attention (DeepSeek's names, kept by GLM).
constexpr Entry kMla[] = {
    {T::q, "{R}layers.{L}.self_attn.q_proj.weight"},  // without a query LoRA (q_lora_rank null)
    {T::q_a, "{R}layers.{L}.self_attn.q_a_proj.weight"},
    {T::q_a_bias, "{R}layers.{L}.self_attn.q_a_proj.bias"},
    {T::q_a_norm, "{R}layers.{L}.self_attn.q_a_layernorm.weight"},
    {T::q_b, "{R}layers.{L}.self_attn.q_b_proj.weight"},
    {T::kv_a, "{R}layers.{L}.self_attn.kv_a_proj_with_mqa.weight"},
    {T::kv_a_bias, "{R}layers.{L}.self_attn.kv_a_proj_with_mqa.bias"},
    {T::kv_a_norm, "{R}layers.{L}.self_attn.kv_a_layernorm.weight"},
    {T::kv_b, "{R}layers.{L}.self_attn.kv_b_proj.weight"},
    {T::o, "{R}layers.{L}.self_attn.o_proj.weight"},
    {T::o_bias, "{R}layers.{L}.self_attn.o_proj.bias"},
};

// Grouped-query attention with q/k/v biases and per-head q/k norms (GLM-4.5/4.6).
constexpr Entry kGqa[] = {
    {T::q, "{R}layers.{L}.self_attn.q_proj.weight"},
    {T::k, "{R}layers.{L}.self_attn.k_proj.weight"},
    {T::v, "{R}layers.{L}.self_attn.v_proj.weight"},
    {T::o, "{R}layers.{L}.self_attn.o_proj.weight"},
    {T::q_bias, "{R}layers.{L}.self_attn.q_proj.bias"},
    {T::k_bias, "{R}layers.{L}.self_attn.k_proj.bias"},
    {T::v_bias, "{R}layers.{L}.self_attn.v_proj.bias"},
    {T::q_norm, "{R}layers.{L}.self_attn.q_norm.weight"},
    {T::k_norm, "{R}layers.{L}.self_attn.k_norm.weight"},
};

// glm5_next's other tensors: the DSA indexer of a sparse layer, the KDA layers (also under
// "self_attn.", where a sparse layer has its MLA; the layer's kind says which), and the
// hyper-connections around each half of every layer.
constexpr Entry kGlm5Next[] = {
    {T::index_wq_b, "{R}layers.{L}.self_attn.indexer.wq_b.weight"},
    {T::index_wk, "{R}layers.{L}.self_attn.indexer.wk.weight"},
    {T::index_k_norm, "{R}layers.{L}.self_attn.indexer.k_norm.weight"},
    {T::index_k_norm_bias, "{R}layers.{L}.self_attn.indexer.k_norm.bias"},
    {T::index_weights, "{R}layers.{L}.self_attn.indexer.weights_proj.weight"},
    {T::index_kpool_ape, "{R}layers.{L}.self_attn.indexer.index_kpool_compress_ape"},
    {T::index_kpool_gate, "{R}layers.{L}.self_attn.indexer.index_kpool_compress_gate"},
    {T::kda_q, "{R}layers.{L}.self_attn.q_proj.weight"},
    {T::kda_k, "{R}layers.{L}.self_attn.k_proj.weight"},
    {T::kda_v, "{R}layers.{L}.self_attn.v_proj.weight"},
    {T::kda_conv, "{R}layers.{L}.self_attn.conv1d.weight"},
    {T::kda_f_a, "{R}layers.{L}.self_attn.forget_gate.f_a_proj.weight"},
    {T::kda_f_b, "{R}layers.{L}.self_attn.forget_gate.f_b_proj.weight"},
    {T::kda_dt_bias, "{R}layers.{L}.self_attn.forget_gate.dt_bias"},
    {T::kda_a_log, "{R}layers.{L}.self_attn.forget_gate.A_log"},
    {T::kda_b, "{R}layers.{L}.self_attn.b_proj.weight"},
    {T::kda_g_a, "{R}layers.{L}.self_attn.g_a_proj.weight"},
    {T::kda_g_b, "{R}layers.{L}.self_attn.g_b_proj.weight"},
    {T::kda_o_norm, "{R}layers.{L}.self_attn.o_norm.weight"},
    {T::kda_o, "{R}layers.{L}.self_attn.o_proj.weight"},
    {T::attn_hc_fn, "{R}layers.{L}.attn_hc.fn"},
    {T::attn_hc_base, "{R}layers.{L}.attn_hc.base"},
    {T::attn_hc_scale, "{R}layers.{L}.attn_hc.scale"},
    {T::ffn_hc_fn, "{R}layers.{L}.ffn_hc.fn"},
    {T::ffn_hc_base, "{R}layers.{L}.ffn_hc.base"},
    {T::ffn_hc_scale, "{R}layers.{L}.ffn_hc.scale"},
};

template <std::size_t... N>
Table table(const Entry (&... parts)[N]) {
  Table t{};
  for (const auto& part : {std::pair<const Entry*, std::size_t>{parts, N}...})
    for (std::size_t i = 0; i < part.second; ++i) t[static_cast<std::size_t>(part.first[i].first)] = part.first[i].second;
  return t;
}

void replace_all(std::string& s, std::string_view what, const std::string& with) {
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size())) s.replace(at, what.size(), with);
}

}  // namespace

std::string TensorNames::operator()(Tensor t, int layer, int expert) const {
  std::string name(patterns_[static_cast<std::size_t>(t)]);
  replace_all(name, "{R}", root_);
  if (layer >= 0) replace_all(name, "{L}", std::to_string(layer));
  if (expert >= 0) replace_all(name, "{E}", std::to_string(expert));
  return name;
}

TensorNames TensorNames::with_root(std::string root) const { return TensorNames(patterns_, std::move(root)); }

const TensorNames& TensorNames::glm4_moe_lite() {
  static const Table t = table(kDecoder, kMla);
  static const TensorNames names(t.data(), "model.");
  return names;
}

const TensorNames& TensorNames::glm4_moe() {
  static const Table t = table(kDecoder, kGqa);
  static const TensorNames names(t.data(), "model.");
  return names;
}

const TensorNames& TensorNames::glm5_next() {
  static const Table t = table(kDecoder, kMla, kGlm5Next);
  static const TensorNames names(t.data(), "model.");
  return names;
}

}  // namespace tandem::model::detail
