// config.json -> typed config. The defaults are those of transformers 5.17's Glm4MoeLiteConfig,
// Glm4MoeConfig and Glm5NextTextConfig, used only where a field is absent.
#include "tandem/model/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "config_reader.hpp"

namespace tandem::model {

using detail::FieldReader;
using nlohmann::json;

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types{"glm4_moe_lite", "glm4_moe", "glm5_next_text", "glm5_next"};
  return types;
}

const DecoderConfig& ModelConfig::decoder() const {
  return std::visit([](const auto& a) -> const DecoderConfig& { return a.d; }, arch);
}

namespace {

// The quantised checkpoints tandem reads (kernels/quant_weights.hpp has the layouts): fp8 with
// 128x128 block scales, and ModelOpt NVFP4 with groups of 16. Each quantised tensor names its
// scales beside it, so the loader needs nothing from here but the assurance that the format is one
// of these; anything else (GPTQ, AWQ, per-channel fp8, ...) is refused by name.
void check_quantization(FieldReader& r) {
  const json* q = r.raw("quantization_config");
  if (!q) return;
  const std::string where = "field 'quantization_config'";
  if (!q->is_object() || !q->contains("quant_method") || !(*q)["quant_method"].is_string()) {
    r.fail(where + ": expected an object with a \"quant_method\"");
    return;
  }
  const std::string method = (*q)["quant_method"].get<std::string>();
  if (method == "fp8") {
    const json block = q->value("weight_block_size", json());
    if (block != json::array({128, 128}))
      r.fail(where + ": fp8 checkpoints are read with weight_block_size [128, 128] (got " + block.dump() +
             "; per-tensor and per-channel fp8 are not supported)");
    return;
  }
  if (method == "modelopt") {
    const std::string algo = q->value("quant_algo", std::string());
    const int group = q->value("group_size", 16);
    if (algo != "NVFP4" || group != 16)
      r.fail(where + ": ModelOpt checkpoints are read in NVFP4 with group_size 16 (got quant_algo \"" + algo +
             "\", group_size " + std::to_string(group) + ")");
    return;
  }
  r.fail(where + ": quant_method \"" + method +
         "\" is not supported (tandem reads bf16/fp16/fp32 weights, \"fp8\" with 128x128 block scales and "
         "\"modelopt\" NVFP4)");
}

// Fields that cannot change the forward pass: bookkeeping, training-only knobs, generation
// defaults (transformers moves those to the generation config), and the multi-token-prediction
// layers, whose weights sit after the last decoder layer and which the plain forward never runs.
void accept_harmless(FieldReader& r) {
  for (const char* key :
       {"transformers_version", "architectures", "torch_dtype", "model_type", "_name_or_path",
        "name_or_path", "initializer_range", "use_cache", "attention_dropout", "output_hidden_states",
        "output_attentions", "return_dict", "chunk_size_feed_forward", "id2label", "label2id",
        "problem_type", "num_labels", "tokenizer_class", "output_router_logits",
        "router_aux_loss_coef", "ep_size", "num_nextn_predict_layers", "num_mtp_layers",
        "pretraining_tp", "max_length", "do_sample", "temperature", "top_p", "top_k"})
    r.accept(key);
  if (r.has("is_encoder_decoder") && r.boolean("is_encoder_decoder")) r.fail("is_encoder_decoder=true is not a decoder-only model");
  r.accept("is_encoder_decoder");
  check_quantization(r);
}

// Rotary parameters as transformers standardises them: rope_scaling (legacy name), when set,
// replaces rope_parameters; inside the dict, rope_theta and partial_rotary_factor win over the
// top-level fields of the same name. Only the plain ("default") rotary is implemented.
void read_rope(FieldReader& r, double default_prf, double& theta, double& prf) {
  const json* params = nullptr;
  const json* scaling = r.raw("rope_scaling");
  const json* parameters = r.raw("rope_parameters");
  if (scaling && !scaling->is_null()) params = scaling;
  else if (parameters && !parameters->is_null()) params = parameters;
  theta = r.number("rope_theta", 10000.0);
  prf = r.number("partial_rotary_factor", default_prf);
  if (!params) return;
  if (!params->is_object()) return r.fail("rope parameters must be an object, got " + params->dump());
  FieldReader p(*params, r.where() + ": " + (params == scaling ? "rope_scaling" : "rope_parameters"));
  std::string type = p.string("rope_type", p.has("type") ? p.string("type") : std::string("default"));
  p.accept("type");
  if (type != "default")
    return r.fail(std::string(params == scaling ? "rope_scaling" : "rope_parameters") + " type '" + type +
                  "' is not implemented (only the default rotary embedding is)");
  theta = p.number("rope_theta", theta);
  prf = p.number("partial_rotary_factor", prf);
  p.refuse_unread();
  if (!p.ok()) r.fail(p.error().message.substr(r.where().size() + 2));
}

void read_moe(FieldReader& r, MoeConfig& m, int experts_default, int topk_default, double scale_default,
              int moe_width_default) {
  m.n_routed_experts = r.integer("n_routed_experts", experts_default);
  m.num_experts_per_tok = r.integer("num_experts_per_tok", topk_default);
  m.n_shared_experts = r.integer("n_shared_experts", 1);
  m.moe_intermediate_size = r.integer("moe_intermediate_size", moe_width_default);
  m.n_group = r.integer("n_group", 1);
  m.topk_group = r.integer("topk_group", 1);
  m.norm_topk_prob = r.boolean("norm_topk_prob", true);
  m.routed_scaling_factor = r.number("routed_scaling_factor", scale_default);
  // Older GLM/DeepSeek configs spell out the routing method; only the one implemented is allowed.
  if (r.string("topk_method", "noaux_tc") != "noaux_tc")
    r.fail("topk_method '" + r.string("topk_method") + "' is not implemented (only noaux_tc is)");
  if (r.string("scoring_func", "sigmoid") != "sigmoid")
    r.fail("scoring_func '" + r.string("scoring_func") + "' is not implemented (only sigmoid is)");
  if (r.integer("moe_layer_freq", 1) != 1) r.fail("moe_layer_freq other than 1 is not implemented");
  if (r.integer("decoder_sparse_step", 1) != 1) r.fail("decoder_sparse_step other than 1 is not implemented");
  if (r.has("num_experts") && r.integer("num_experts") != m.n_routed_experts)
    r.fail("num_experts disagrees with n_routed_experts");
  r.accept("num_experts");
  r.accept("num_local_experts");
  if (r.has("num_local_experts") && r.integer("num_local_experts") != m.n_routed_experts)
    r.fail("num_local_experts disagrees with n_routed_experts");
}

// Which layers are MoE: mlp_layer_types (["dense", "sparse", ...]) or first_k_dense_replace.
// glm4_moe_lite follows mlp_layer_types (default: only layer 0 dense) and transformers ignores
// first_k_dense_replace there; glm4_moe follows first_k_dense_replace. When a config has both they
// must agree; a first_k_dense_replace that the model's own rule would ignore is refused.
void read_layer_kinds(FieldReader& r, DecoderConfig& d, bool lite) {
  const int n = d.num_hidden_layers;
  std::optional<int> first_k = r.optional_integer("first_k_dense_replace");
  const json* types = r.raw("mlp_layer_types");
  d.layer_is_moe.assign(static_cast<size_t>(n > 0 ? n : 0), true);
  if (types && !types->is_null()) {
    if (!types->is_array() || static_cast<int>(types->size()) != n)
      return r.fail("mlp_layer_types must list one of \"dense\"/\"sparse\" per layer (" + std::to_string(n) +
                    "), got " + types->dump());
    for (int i = 0; i < n; ++i) {
      const json& t = (*types)[static_cast<size_t>(i)];
      if (t != "dense" && t != "sparse") return r.fail("mlp_layer_types[" + std::to_string(i) + "] is " + t.dump() + ", expected \"dense\" or \"sparse\"");
      d.layer_is_moe[static_cast<size_t>(i)] = t == "sparse";
    }
    if (first_k) {
      for (int i = 0; i < n; ++i)
        if (d.layer_is_moe[static_cast<size_t>(i)] != (i >= *first_k))
          return r.fail("first_k_dense_replace=" + std::to_string(*first_k) + " disagrees with mlp_layer_types");
    }
    return;
  }
  const int k = first_k.value_or(1);
  if (lite && k != 1)
    return r.fail("first_k_dense_replace=" + std::to_string(k) +
                  " without mlp_layer_types: transformers' glm4_moe_lite ignores it (only layer 0 is dense); "
                  "state mlp_layer_types to say which layers are dense");
  for (int i = 0; i < n; ++i) d.layer_is_moe[static_cast<size_t>(i)] = i >= k;
}

void read_decoder(FieldReader& r, DecoderConfig& d, int vocab_default, int hidden_default,
                  int inter_default, int layers_default, int heads_default, int kv_default,
                  int max_pos_default) {
  d.vocab_size = r.integer("vocab_size", vocab_default);
  d.hidden_size = r.integer("hidden_size", hidden_default);
  d.intermediate_size = r.integer("intermediate_size", inter_default);
  d.num_hidden_layers = r.integer("num_hidden_layers", layers_default);
  d.num_attention_heads = r.integer("num_attention_heads", heads_default);
  d.num_key_value_heads = r.integer("num_key_value_heads", kv_default);
  d.rms_norm_eps = r.number("rms_norm_eps", 1e-5);
  d.max_position_embeddings = r.integer("max_position_embeddings", max_pos_default);
  d.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  d.attention_bias = r.boolean("attention_bias", false);
  d.pad_token_id = r.optional_integer("pad_token_id");
  d.eos_token_ids = r.integer_list("eos_token_id");
  d.dtype = r.has("dtype") ? r.string("dtype") : (r.has("torch_dtype") ? r.string("torch_dtype") : "");
  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act '" + act + "' is not implemented (only silu is)");
}

void check_positive(FieldReader& r, const char* name, int v) {
  if (v <= 0) r.fail(std::string(name) + " must be positive, got " + std::to_string(v));
}

void check_decoder(FieldReader& r, const DecoderConfig& d) {
  check_positive(r, "vocab_size", d.vocab_size);
  check_positive(r, "hidden_size", d.hidden_size);
  check_positive(r, "num_hidden_layers", d.num_hidden_layers);
  check_positive(r, "num_attention_heads", d.num_attention_heads);
  check_positive(r, "num_key_value_heads", d.num_key_value_heads);
  if (!(d.rms_norm_eps >= 0)) r.fail("rms_norm_eps must not be negative");
  if (!(d.rope_theta > 0)) r.fail("rope_theta must be positive");
  bool any_moe = false, any_dense = false;
  for (bool m : d.layer_is_moe) (m ? any_moe : any_dense) = true;
  if (any_dense) check_positive(r, "intermediate_size", d.intermediate_size);
  if (!any_moe) return;
  const MoeConfig& m = d.moe;
  check_positive(r, "n_routed_experts", m.n_routed_experts);
  check_positive(r, "moe_intermediate_size", m.moe_intermediate_size);
  check_positive(r, "n_group", m.n_group);
  check_positive(r, "num_experts_per_tok", m.num_experts_per_tok);
  if (m.n_shared_experts < 0) r.fail("n_shared_experts must not be negative");
  if (m.n_group > 0 && m.n_routed_experts % m.n_group != 0)
    return r.fail("n_routed_experts (" + std::to_string(m.n_routed_experts) + ") is not a multiple of n_group (" +
                  std::to_string(m.n_group) + ")");
  const int per_group = m.n_group > 0 ? m.n_routed_experts / m.n_group : 0;
  // A group is scored by the sum of its two best experts, so it needs two.
  if (per_group < 2) r.fail("each expert group needs at least 2 experts (n_routed_experts / n_group)");
  if (m.topk_group < 1 || m.topk_group > m.n_group) r.fail("topk_group must be in [1, n_group]");
  if (m.num_experts_per_tok > m.topk_group * per_group)
    r.fail("num_experts_per_tok exceeds the experts in the topk_group chosen groups");
}

Result<ModelConfig> parse_lite(FieldReader& r) {
  Glm4MoeLiteConfig c;
  DecoderConfig& d = c.d;
  read_decoder(r, d, 154880, 2048, 10240, 47, 20, 20, 202752);
  d.bos_token_id = r.raw("bos_token_id") ? r.optional_integer("bos_token_id") : std::optional<int>(0);
  if (!r.raw("eos_token_id")) d.eos_token_ids = {1};
  read_moe(r, d.moe, 64, 4, 1.8, 1536);
  read_layer_kinds(r, d, true);
  c.q_lora_rank = r.optional_integer("q_lora_rank").value_or(0);
  if (!r.raw("q_lora_rank")) c.q_lora_rank = 768;
  c.kv_lora_rank = r.integer("kv_lora_rank", 512);
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", 64);
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim", 192);
  c.v_head_dim = r.integer("v_head_dim", 256);
  c.rope_interleave = r.boolean("rope_interleave", true);
  double prf = 1.0;
  read_rope(r, 1.0, d.rope_theta, prf);
  // transformers sizes the rotary from head_dim, which this model maps to qk_rope_head_dim.
  if (r.has("head_dim") && r.integer("head_dim") != c.qk_rope_head_dim)
    r.fail("head_dim must equal qk_rope_head_dim in glm4_moe_lite");
  if (r.has("qk_head_dim") && r.integer("qk_head_dim") != c.qk_head_dim())
    r.fail("qk_head_dim must equal qk_nope_head_dim + qk_rope_head_dim");
  if (static_cast<int>(c.qk_rope_head_dim * prf) != c.qk_rope_head_dim)
    r.fail("partial_rotary_factor " + std::to_string(prf) + " is not implemented for glm4_moe_lite (the rotary "
           "covers all qk_rope_head_dim dimensions)");
  if (d.num_key_value_heads != d.num_attention_heads)
    r.fail("glm4_moe_lite expands its latent into one key/value per head: num_key_value_heads must equal "
           "num_attention_heads");
  if (c.q_lora_rank < 0) r.fail("q_lora_rank must not be negative");
  check_positive(r, "kv_lora_rank", c.kv_lora_rank);
  check_positive(r, "qk_rope_head_dim", c.qk_rope_head_dim);
  check_positive(r, "v_head_dim", c.v_head_dim);
  if (c.qk_nope_head_dim < 0) r.fail("qk_nope_head_dim must not be negative");
  if (c.qk_rope_head_dim % 2) r.fail("qk_rope_head_dim must be even");
  check_decoder(r, d);
  accept_harmless(r);
  r.refuse_unread();
  if (!r.ok()) return r.error();
  return ModelConfig{"glm4_moe_lite", c};
}

Result<ModelConfig> parse_glm4_moe(FieldReader& r) {
  Glm4MoeConfig c;
  DecoderConfig& d = c.d;
  read_decoder(r, d, 151552, 4096, 10944, 46, 96, 8, 131072);
  d.bos_token_id = r.optional_integer("bos_token_id");
  read_moe(r, d.moe, 128, 8, 1.0, 1408);
  read_layer_kinds(r, d, false);
  c.use_qk_norm = r.boolean("use_qk_norm", false);
  double prf = 0.5;
  read_rope(r, 0.5, d.rope_theta, prf);
  c.head_dim = r.integer("head_dim", d.num_attention_heads > 0 ? d.hidden_size / d.num_attention_heads : 0);
  c.rotary_dim = static_cast<int>(c.head_dim * prf);
  if (!(prf > 0 && prf <= 1)) r.fail("partial_rotary_factor must be in (0, 1]");
  if (c.rotary_dim % 2) r.fail("rotary dimensions (head_dim * partial_rotary_factor) must be even");
  check_positive(r, "head_dim", c.head_dim);
  if (d.num_key_value_heads > 0 && d.num_attention_heads % d.num_key_value_heads)
    r.fail("num_attention_heads must be a multiple of num_key_value_heads");
  check_decoder(r, d);
  accept_harmless(r);
  r.refuse_unread();
  if (!r.ok()) return r.error();
  return ModelConfig{"glm4_moe", c};
}

// Reads a list of per-layer strings, each one of `values` (index in `values` per layer).
std::vector<int> read_layer_list(FieldReader& r, const std::string& key, int n, const std::vector<std::string>& values) {
  std::vector<int> out;
  const json* list = r.raw(key);
  std::string allowed;
  for (const auto& v : values) allowed += (allowed.empty() ? "\"" : ", \"") + v + "\"";
  if (!list->is_array() || static_cast<int>(list->size()) != n) {
    r.fail(key + " must list one of " + allowed + " per layer (" + std::to_string(n) + "), got " + list->dump());
    return out;
  }
  for (int i = 0; i < n; ++i) {
    const json& t = (*list)[static_cast<size_t>(i)];
    const auto it = t.is_string() ? std::find(values.begin(), values.end(), t.get<std::string>()) : values.end();
    if (it == values.end()) {
      r.fail(key + "[" + std::to_string(i) + "] is " + t.dump() + ", expected one of " + allowed);
      return {};
    }
    out.push_back(static_cast<int>(it - values.begin()));
  }
  return out;
}

// glm5_next's per-layer kinds: dense or MoE MLP, linear or sparse attention, full or shared
// indexer, each from its list or from the schedule transformers falls back to.
void read_glm5_next_layers(FieldReader& r, Glm5NextConfig& c) {
  DecoderConfig& d = c.d;
  const int n = d.num_hidden_layers;
  // mlp_layer_types, else the first 3 layers dense. transformers does not read
  // first_k_dense_replace here; a value that disagrees with what runs is refused.
  if (r.has("mlp_layer_types")) {
    read_layer_kinds(r, d, false);
  } else {
    const auto first_k = r.optional_integer("first_k_dense_replace");
    d.layer_is_moe.assign(static_cast<size_t>(std::max(n, 0)), false);
    for (int i = 3; i < n; ++i) d.layer_is_moe[static_cast<size_t>(i)] = true;
    if (first_k && *first_k != std::min(3, std::max(n, 0)))
      r.fail("first_k_dense_replace=" + std::to_string(*first_k) + " without mlp_layer_types: transformers' " +
             "glm5_next makes the first 3 layers dense whatever it says; state mlp_layer_types");
  }
  r.accept("mlp_layer_types");
  // layer_types, else every 4th layer (3, 7, ...) attention, the rest linear; "full_attention" is
  // the old name of "deepseek_sparse_attention".
  c.layer_is_linear.assign(static_cast<size_t>(std::max(n, 0)), true);
  if (r.has("layer_types")) {
    const auto kinds = read_layer_list(r, "layer_types", n, {"linear_attention", "deepseek_sparse_attention", "full_attention"});
    for (size_t i = 0; i < kinds.size(); ++i) c.layer_is_linear[i] = kinds[i] == 0;
  } else {
    for (int i = 0; i < n; ++i) c.layer_is_linear[static_cast<size_t>(i)] = i % 4 != 3;
  }
  r.accept("layer_types");
  // indexer_types, else index_topk_pattern ("FSSF..." or a list), else the freq/offset schedule.
  c.indexer_is_shared.assign(static_cast<size_t>(std::max(n, 0)), false);
  if (r.has("indexer_types")) {
    const auto kinds = read_layer_list(r, "indexer_types", n, {"full", "shared"});
    for (size_t i = 0; i < kinds.size(); ++i) c.indexer_is_shared[i] = kinds[i] == 1;
  } else if (r.has("index_topk_pattern")) {
    const json& pat = *r.raw("index_topk_pattern");
    if (pat.is_string()) {
      const std::string s = pat.get<std::string>();
      if (static_cast<int>(s.size()) != n || s.find_first_not_of("FS") != std::string::npos)
        r.fail("index_topk_pattern must be one 'F' or 'S' per layer (" + std::to_string(n) + "), got \"" + s + "\"");
      else
        for (int i = 0; i < n; ++i) c.indexer_is_shared[static_cast<size_t>(i)] = s[static_cast<size_t>(i)] == 'S';
    } else {
      const auto kinds = read_layer_list(r, "index_topk_pattern", n, {"full", "shared"});
      for (size_t i = 0; i < kinds.size(); ++i) c.indexer_is_shared[i] = kinds[i] == 1;
    }
  } else {
    const int freq = std::max(r.integer("index_topk_freq", 1), 1);
    const int offset = r.integer("index_skip_topk_offset", 2);
    for (int i = 0; i < n; ++i) c.indexer_is_shared[static_cast<size_t>(i)] = std::max(i - offset + 1, 0) % freq != 0;
  }
  r.accept("indexer_types");
  r.accept("index_topk_pattern");
  r.accept("index_topk_freq");
  r.accept("index_skip_topk_offset");
}

// The sparse (MLA + DSA indexer) attention's sizes, and the SwiGLU clamp.
void read_glm5_next_attention(FieldReader& r, Glm5NextConfig& c) {
  c.q_lora_rank = r.optional_integer("q_lora_rank").value_or(0);
  if (!r.raw("q_lora_rank")) c.q_lora_rank = 1536;
  c.kv_lora_rank = r.integer("kv_lora_rank", 512);
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", 0);
  c.qk_nope_head_dim = r.integer("qk_nope_head_dim", 256);
  c.v_head_dim = r.integer("v_head_dim", 256);
  // transformers overwrites head_dim with qk_rope_head_dim, so any value is harmless.
  r.accept("head_dim");
  if (r.has("qk_head_dim") && r.integer("qk_head_dim") != c.qk_head_dim())
    r.fail("qk_head_dim must equal qk_nope_head_dim + qk_rope_head_dim");
  // No rotary embedding runs in this model (NoPE): rope parameters cannot change the forward pass.
  for (const char* key : {"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor", "rope_interleave"})
    r.accept(key);
  c.index_topk = r.integer("index_topk", 2048);
  c.index_head_dim = r.integer("index_head_dim", 128);
  c.index_n_heads = r.integer("index_n_heads", 32);
  c.index_kpool = r.integer("index_kpool", 16);
  c.index_kpool_always_select_tail = r.boolean("index_kpool_always_select_tail", true);
  if (r.raw("swiglu_limit") && r.raw("swiglu_limit")->is_null())
    r.fail("swiglu_limit is null: transformers 5.17's glm5_next requires a number (it always clamps)");
  else
    c.d.swiglu_limit = r.number("swiglu_limit", 10.0);
}

// The linear (KDA) attention's sizes, flat or in the original checkpoints' linear_attn_config.
void read_glm5_next_linear(FieldReader& r, Glm5NextConfig& c) {
  c.linear_head_dim = r.integer("linear_head_dim", 128);
  c.linear_num_heads = r.integer("linear_num_heads", 64);
  c.linear_conv_kernel_dim = r.integer("linear_conv_kernel_dim", 4);
  c.linear_lower_bound = -5.0;
  if (r.raw("linear_lower_bound")) c.linear_lower_bound = r.has("linear_lower_bound") ? std::optional<double>(r.number("linear_lower_bound")) : std::nullopt;
  // The original checkpoints' spelling of the linear-attention fields; it wins over the flat ones.
  if (const json* la = r.raw("linear_attn_config"); la && !la->is_null()) {
    if (!la->is_object()) {
      r.fail("linear_attn_config must be an object, got " + la->dump());
    } else {
      FieldReader l(*la, r.where() + ": linear_attn_config");
      c.linear_head_dim = l.integer("head_dim", c.linear_head_dim);
      c.linear_num_heads = l.integer("num_heads", c.linear_num_heads);
      c.linear_conv_kernel_dim = l.integer("short_conv_kernel_size", c.linear_conv_kernel_dim);
      if (l.raw("lower_bound")) c.linear_lower_bound = l.has("lower_bound") ? std::optional<double>(l.number("lower_bound")) : std::nullopt;
      if (l.boolean("safe_gate", false) && !c.linear_lower_bound) c.linear_lower_bound = -5.0;
      l.refuse_unread();
      if (!l.ok()) r.fail(l.error().message.substr(r.where().size() + 2));
    }
  }
}

// What the fields must satisfy together, beyond each one's own range.
void check_glm5_next(FieldReader& r, const Glm5NextConfig& c) {
  const DecoderConfig& d = c.d;
  const int n = d.num_hidden_layers;
  if (d.num_key_value_heads != d.num_attention_heads)
    r.fail("glm5_next expands its latent into one key/value per head: num_key_value_heads must equal "
           "num_attention_heads");
  if (c.q_lora_rank <= 0) r.fail("q_lora_rank must be positive: glm5_next's sparse attention requires the query LoRA");
  check_positive(r, "kv_lora_rank", c.kv_lora_rank);
  check_positive(r, "qk_nope_head_dim", c.qk_nope_head_dim);
  check_positive(r, "v_head_dim", c.v_head_dim);
  if (c.qk_rope_head_dim < 0) r.fail("qk_rope_head_dim must not be negative");
  check_positive(r, "index_n_heads", c.index_n_heads);
  check_positive(r, "index_head_dim", c.index_head_dim);
  check_positive(r, "index_kpool", c.index_kpool);
  check_positive(r, "index_topk", c.index_topk);
  if (c.index_kpool > 0 && c.index_topk % c.index_kpool)
    r.fail("index_topk (" + std::to_string(c.index_topk) + ") must be divisible by index_kpool (" + std::to_string(c.index_kpool) + ")");
  check_positive(r, "linear_num_heads", c.linear_num_heads);
  check_positive(r, "linear_head_dim", c.linear_head_dim);
  check_positive(r, "linear_conv_kernel_dim", c.linear_conv_kernel_dim);
  check_positive(r, "hc_mult", c.hc_mult);
  check_positive(r, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  if (!(c.hc_eps >= 0)) r.fail("hc_eps must not be negative");
  if (d.swiglu_limit && !(*d.swiglu_limit > 0)) r.fail("swiglu_limit must be positive");
  // A "shared" attention layer reuses the selection its predecessor hands on, which transformers
  // does only from a "full" attention layer directly before it.
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    if (c.layer_is_linear[u] || !c.indexer_is_shared[u]) continue;
    if (i == 0 || c.layer_is_linear[u - 1] || c.indexer_is_shared[u - 1])
      r.fail("layer " + std::to_string(i) + " is a sparse-attention layer with a shared indexer, but layer " +
             std::to_string(i - 1) + " is not a sparse-attention layer with a full indexer to share from");
  }
}

// The text stack of glm5_next: `r` reads the text fields (a text_config object, or the top level
// of a flat text-only config).
Result<ModelConfig> parse_glm5_next_text(FieldReader& r, const std::string& model_type) {
  Glm5NextConfig c;
  DecoderConfig& d = c.d;
  read_decoder(r, d, 154880, 4096, 12288, 45, 64, 64, 4096);
  d.bos_token_id = r.optional_integer("bos_token_id");
  if (!r.raw("pad_token_id")) d.pad_token_id = 154820;
  read_moe(r, d.moe, 288, 8, 2.5, 2048);
  read_glm5_next_layers(r, c);
  read_glm5_next_attention(r, c);
  read_glm5_next_linear(r, c);
  c.hc_mult = r.integer("hc_mult", 4);
  c.hc_eps = r.number("hc_eps", 1e-6);
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters", 20);
  check_glm5_next(r, c);
  check_decoder(r, d);
  accept_harmless(r);
  r.refuse_unread();
  if (!r.ok()) return r.error();
  return ModelConfig{model_type, c};
}

// glm5_next: the multimodal wrapper. Its text_config (or, in a flat text-only file, the top level)
// is the text stack; the vision tower and its token ids are out of scope (text input only).
Result<ModelConfig> parse_glm5_next(const json& doc, FieldReader& top) {
  for (const char* key : {"vision_config", "image_token_id", "video_token_id", "image_start_token_id",
                          "image_end_token_id", "video_start_token_id", "video_end_token_id"})
    top.accept(key);
  const json* text = top.raw("text_config");
  if (!text || text->is_null()) return parse_glm5_next_text(top, "glm5_next");
  if (!text->is_object()) return error(top.where() + ": text_config must be an object, got " + text->dump());
  if (text->contains("model_type") && (*text)["model_type"] != "glm5_next_text")
    return error(top.where() + ": text_config has model_type " + (*text)["model_type"].dump() + ", expected \"glm5_next_text\"");
  if (doc.contains("tie_word_embeddings") && doc["tie_word_embeddings"] == true)
    return error(top.where() + ": tie_word_embeddings=true is not implemented for glm5_next");
  top.accept("tie_word_embeddings");
  accept_harmless(top);
  top.refuse_unread();
  if (!top.ok()) return top.error();
  FieldReader r(*text, top.where() + ": text_config");
  return parse_glm5_next_text(r, "glm5_next");
}

Result<json> read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return error(path.string() + ": cannot open");
  json doc = json::parse(in, nullptr, false);
  if (doc.is_discarded()) return error(path.string() + ": not valid JSON");
  if (!doc.is_object()) return error(path.string() + ": expected a JSON object");
  return doc;
}

}  // namespace

Result<ModelConfig> parse_config(const json& doc, const std::string& source) {
  if (!doc.is_object()) return error(source + ": expected a JSON object");
  if (!doc.contains("model_type") || !doc["model_type"].is_string())
    return error(source + ": missing field 'model_type' (the architecture)");
  const std::string type = doc["model_type"].get<std::string>();
  FieldReader r(doc, source);
  if (type == "glm4_moe_lite") return parse_lite(r);
  if (type == "glm4_moe") return parse_glm4_moe(r);
  if (type == "glm5_next_text") return parse_glm5_next_text(r, type);
  if (type == "glm5_next") return parse_glm5_next(doc, r);
  std::string known;
  for (const auto& t : supported_model_types()) known += (known.empty() ? "" : ", ") + t;
  return error(source + ": unknown architecture (model_type '" + type + "'); this build runs " + known);
}

Result<ModelConfig> load_config(const std::filesystem::path& dir) {
  auto doc = read_json(dir / "config.json");
  if (!doc) return doc.error();
  auto cfg = parse_config(doc.value(), (dir / "config.json").string());
  if (!cfg) return cfg.error();
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    auto gen = read_json(gen_path);
    if (!gen) return gen.error();
    // Only the ids matter to the engine; sampling defaults there are the API layer's business.
    FieldReader g(gen.value(), gen_path.string());
    DecoderConfig& d = std::visit([](auto& a) -> DecoderConfig& { return a.d; }, cfg.value().arch);
    if (g.raw("eos_token_id")) d.eos_token_ids = g.integer_list("eos_token_id");
    if (g.raw("bos_token_id")) d.bos_token_id = g.optional_integer("bos_token_id");
    if (g.raw("pad_token_id")) d.pad_token_id = g.optional_integer("pad_token_id");
    if (!g.ok()) return g.error();
  }
  return cfg;
}

}  // namespace tandem::model
