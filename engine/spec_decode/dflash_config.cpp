// config.json of a DFlash drafter. The drafter's own fields follow Qwen3's config; DFlash's live in
// "dflash_config" (newer files) or at the top level (older files), the former winning.
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tandem/spec/drafter.hpp"

namespace tandem::spec {

using model::error;
using nlohmann::json;

namespace {

// A DFlash key: dflash_config.<name> first, then the top level.
const json* dflash_key(const json& doc, const std::string& name) {
  if (auto d = doc.find("dflash_config"); d != doc.end() && d->is_object())
    if (auto it = d->find(name); it != d->end() && !it->is_null()) return &*it;
  if (auto it = doc.find(name); it != doc.end() && !it->is_null()) return &*it;
  return nullptr;
}

}  // namespace

Result<DFlashConfig> parse_dflash_config(const json& doc, const std::string& source) {
  auto fail = [&](const std::string& what) { return error(source + ": " + what); };
  if (!doc.is_object()) return fail("not a JSON object");
  DFlashConfig c;
  auto need_int = [&](const char* key, int& out, int min) -> std::optional<Error> {
    auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_integer()) return fail(std::string("\"") + key + "\" (an integer) is required");
    out = it->get<int>();
    if (out < min) return fail(std::string("\"") + key + "\" must be at least " + std::to_string(min));
    return std::nullopt;
  };
  for (auto [key, out, min] : {std::tuple{"hidden_size", &c.hidden_size, 1}, {"num_hidden_layers", &c.num_hidden_layers, 1},
                               {"num_attention_heads", &c.num_attention_heads, 1}, {"intermediate_size", &c.intermediate_size, 1},
                               {"vocab_size", &c.vocab_size, 1}})
    if (auto e = need_int(key, *out, min)) return *e;
  c.num_key_value_heads = doc.value("num_key_value_heads", c.num_attention_heads);
  c.head_dim = doc.value("head_dim", c.hidden_size / c.num_attention_heads);
  if (c.num_key_value_heads < 1 || c.num_attention_heads % c.num_key_value_heads != 0)
    return fail("num_attention_heads " + std::to_string(c.num_attention_heads) + " is not a multiple of num_key_value_heads " +
                std::to_string(c.num_key_value_heads));
  if (c.head_dim < 2 || c.head_dim % 2 != 0) return fail("head_dim must be even and positive");
  c.rms_norm_eps = doc.value("rms_norm_eps", 1e-6);

  // Rotary: default rope only (theta at the top level, or rope_parameters / rope_scaling of type default).
  c.rope_theta = doc.value("rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) continue;
    if (!it->is_object()) return fail(std::string("\"") + key + "\" must be an object");
    const std::string type = it->value("rope_type", it->value("type", std::string("default")));
    if (type != "default") return fail(std::string("\"") + key + "\" of type \"" + type + "\" is not implemented (default rope only)");
    if (auto t = it->find("rope_theta"); t != it->end() && t->is_number()) c.rope_theta = t->get<double>();
  }
  if (doc.value("attention_bias", false)) return fail("\"attention_bias\": true is not implemented");
  if (auto act = doc.value("hidden_act", std::string("silu")); act != "silu")
    return fail("\"hidden_act\" \"" + act + "\" is not implemented (silu only)");
  if (auto it = doc.find("layer_types"); it != doc.end() && it->is_array())
    for (const auto& t : *it)
      if (t != "full_attention")
        return fail("layer type " + t.dump() + " is not implemented (full_attention only; sliding-window drafters are refused)");
  if (doc.value("use_sliding_window", false) && !doc.contains("layer_types"))
    return fail("\"use_sliding_window\": true is not implemented");
  if (auto it = doc.find("is_causal"); it != doc.end() && it->is_boolean() && it->get<bool>())
    return fail("\"is_causal\": true (a causal drafter) is not DFlash's block attention");
  if (auto it = doc.find("architectures"); it != doc.end() && it->is_array())
    for (const auto& a : *it)
      if (a == "DFlash2DraftModel")
        return fail("DFlash2DraftModel (convolutions and a candidate selector) is not implemented; DFlashDraftModel only");

  if (const json* b = dflash_key(doc, "block_size")) {
    if (!b->is_number_integer() || b->get<int>() < 2) return fail("block_size must be an integer >= 2");
    c.block_size = b->get<int>();
  }
  const json* mask = dflash_key(doc, "mask_token_id");
  if (!mask || !mask->is_number_integer()) return fail("dflash_config.mask_token_id (an integer) is required");
  c.mask_token_id = mask->get<std::int32_t>();
  if (c.mask_token_id < 0 || c.mask_token_id >= c.vocab_size)
    return fail("mask_token_id " + std::to_string(c.mask_token_id) + " is outside the vocabulary");
  const json* ids = dflash_key(doc, "target_layer_ids");
  if (!ids || !ids->is_array() || ids->empty()) return fail("dflash_config.target_layer_ids (a non-empty list) is required");
  for (const auto& v : *ids) {
    if (!v.is_number_integer() || v.get<int>() < 0) return fail("target_layer_ids must be non-negative integers");
    c.target_layer_ids.push_back(v.get<int>());
  }
  for (auto [key, out] : {std::pair{"input_embedding_scale", &c.input_embedding_scale}, {"output_multiplier", &c.output_multiplier},
                          {"final_logit_softcapping", &c.final_logit_softcapping}})
    if (const json* v = dflash_key(doc, key)) {
      if (!v->is_number()) return fail(std::string(key) + " must be a number");
      *out = v->get<double>();
    }
  return c;
}

}  // namespace tandem::spec
