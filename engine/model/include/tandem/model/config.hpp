// config.json (and generation_config.json) of a Hugging Face model directory, read into a typed
// config per architecture. Every field of config.json is accounted for: a field we implement is
// read and checked; a field that cannot change the forward pass (bookkeeping such as
// transformers_version, training-only knobs such as attention_dropout) is accepted; anything else,
// including a known field with a value we do not implement (say rope_scaling of type "yarn"), is
// refused with an error that names it, so that a model never runs with silently different math.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tandem/model/result.hpp"

namespace tandem::model {

// Sigmoid-scored routing with a selection-only correction bias (DeepSeek-V3 "noaux_tc"), as both
// GLM MoE lines use it.
struct MoeConfig {
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int n_shared_experts = 0;        // the shared MLP is moe_intermediate_size * n_shared_experts wide
  int moe_intermediate_size = 0;
  int n_group = 1;                 // experts are split into n_group groups ...
  int topk_group = 1;              // ... and only the best topk_group groups may be chosen
  bool norm_topk_prob = true;      // renormalise the chosen scores to sum 1
  double routed_scaling_factor = 1.0;
};

// What every GLM decoder here shares.
struct DecoderConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;       // dense MLP width
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::vector<bool> layer_is_moe;  // per layer: MoE block (true) or dense MLP (false)
  MoeConfig moe;
  std::optional<int> bos_token_id, pad_token_id;
  std::vector<int> eos_token_ids;
  std::string dtype;               // storage dtype the checkpoint declares ("" when absent)
  // glm5_next clamps the SwiGLU inputs: gate <= limit, |up| <= limit (dense MLPs and experts).
  std::optional<double> swiglu_limit;
};

// glm4_moe_lite (GLM-4.7-Flash): multi-head latent attention.
struct Glm4MoeLiteConfig {
  DecoderConfig d;
  int q_lora_rank = 0;             // 0: no query LoRA (a plain q_proj)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool rope_interleave = true;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// glm4_moe (GLM-4.5 / 4.6): grouped-query attention with partial rotary.
struct Glm4MoeConfig {
  DecoderConfig d;
  int head_dim = 0;
  int rotary_dim = 0;              // int(head_dim * partial_rotary_factor)
  bool use_qk_norm = false;
};

// glm5_next_text (GLM-5 "next", the text stack of glm5_next): hyper-connection streams around
// every block; each layer is either Kimi-style gated delta-rule linear attention ("KDA", a
// fixed-size recurrent state per sequence) or MLA without rotary plus the DSA lightning indexer
// (k-pooled top-k key selection); the MLPs clamp their SwiGLU inputs.
struct Glm5NextConfig {
  DecoderConfig d;
  std::vector<bool> layer_is_linear;    // layer_types: "linear_attention" (true) / "deepseek_sparse_attention"
  std::vector<bool> indexer_is_shared;  // indexer_types: "shared" reuses the previous layer's selection
  // MLA (no rotary is applied: qk_rope_head_dim dimensions of the key are shared across heads, raw)
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // DSA indexer
  int index_n_heads = 0, index_head_dim = 0, index_topk = 0, index_kpool = 1;
  bool index_kpool_always_select_tail = true;
  // linear attention
  int linear_num_heads = 0, linear_head_dim = 0, linear_conv_kernel_dim = 0;
  std::optional<double> linear_lower_bound;  // sigmoid-bounded forget gate; absent: -exp(A) softplus
  // hyper-connections
  int hc_mult = 1, hc_sinkhorn_iters = 1;
  double hc_eps = 1e-6;
};

using ArchConfig = std::variant<Glm4MoeLiteConfig, Glm4MoeConfig, Glm5NextConfig>;

struct ModelConfig {
  std::string model_type;
  ArchConfig arch;
  const DecoderConfig& decoder() const;
};

// Parses a config.json document; `source` names it in error messages.
Result<ModelConfig> parse_config(const nlohmann::json& doc, const std::string& source);

// Reads <dir>/config.json, then <dir>/generation_config.json when present (its eos ids win).
Result<ModelConfig> load_config(const std::filesystem::path& dir);

// The model types this build can run.
const std::vector<std::string>& supported_model_types();

}  // namespace tandem::model
