// The per-architecture tables of checkpoint tensor names (engine/model/src/tensor_names.hpp). The
// golden tests load real fixtures through them; these pin the spelling of what no fixture has
// (the wrapper's root, fused experts) and that the GLM-4 tables give each tensor its own name.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "tensor_names.hpp"

using tandem::model::detail::Tensor;
using tandem::model::detail::TensorNames;

TEST_CASE("each architecture's table spells the transformers names") {
  const TensorNames& lite = TensorNames::glm4_moe_lite();
  CHECK(lite(Tensor::embed) == "model.embed_tokens.weight");
  CHECK(lite(Tensor::lm_head) == "lm_head.weight");
  CHECK(lite(Tensor::q_b, 3) == "model.layers.3.self_attn.q_b_proj.weight");
  CHECK(lite(Tensor::kv_a_bias, 0) == "model.layers.0.self_attn.kv_a_proj_with_mqa.bias");
  CHECK(lite(Tensor::expert_down, 2, 17) == "model.layers.2.mlp.experts.17.down_proj.weight");
  CHECK(lite(Tensor::experts_gate_up, 2) == "model.layers.2.mlp.experts.gate_up_proj");
  CHECK(lite(Tensor::shared_up, 1) == "model.layers.1.mlp.shared_experts.up_proj.weight");
  CHECK(lite(Tensor::router_bias, 1) == "model.layers.1.mlp.gate.e_score_correction_bias");
  const TensorNames& gqa = TensorNames::glm4_moe();
  CHECK(gqa(Tensor::k_bias, 5) == "model.layers.5.self_attn.k_proj.bias");
  CHECK(gqa(Tensor::q_norm, 0) == "model.layers.0.self_attn.q_norm.weight");
  // A tensor the architecture does not have has no name (the loader then reports it missing).
  CHECK(gqa(Tensor::kv_b, 0).empty());
  CHECK(lite(Tensor::kda_conv, 0).empty());
}

TEST_CASE("glm5_next: the multimodal wrapper's text stack sits under another root; the head does not") {
  const TensorNames& text = TensorNames::glm5_next();
  const TensorNames wrapped = text.with_root("model.language_model.");
  CHECK(text(Tensor::embed) == "model.embed_tokens.weight");
  CHECK(wrapped(Tensor::embed) == "model.language_model.embed_tokens.weight");
  CHECK(wrapped(Tensor::kda_a_log, 4) == "model.language_model.layers.4.self_attn.forget_gate.A_log");
  CHECK(wrapped(Tensor::index_kpool_gate, 3) == "model.language_model.layers.3.self_attn.indexer.index_kpool_compress_gate");
  CHECK(wrapped(Tensor::ffn_hc_scale, 0) == "model.language_model.layers.0.ffn_hc.scale");
  CHECK(wrapped(Tensor::lm_head) == "lm_head.weight");
}

TEST_CASE("the GLM-4 tables give every tensor of a layer its own name") {
  for (const TensorNames* names : {&TensorNames::glm4_moe_lite(), &TensorNames::glm4_moe()}) {
    std::set<std::string> seen;
    int count = 0;
    for (int t = 0; t < static_cast<int>(Tensor::count); ++t) {
      const std::string n = (*names)(static_cast<Tensor>(t), 0, 0);
      if (n.empty()) continue;
      ++count;
      CHECK_MESSAGE(seen.insert(n).second, n);
    }
    CHECK(count >= 25);
  }
}
