// Loading: config fields (accepted, refused), generation_config, and clear errors for broken
// checkpoints, made by breaking temp copies of the fixtures.
#include <doctest/doctest.h>

#include <filesystem>

#include "tandem/model/model.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;
namespace fs = std::filesystem;

namespace {

std::string load_error(const fs::path& dir) {
  auto m = load_model(dir);
  return m.ok() ? std::string("(loaded fine)") : m.error().message;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto doc = read_json(dir / "config.json");
  edit(doc);
  write_json(dir / "config.json", doc);
}

}  // namespace

TEST_CASE("config: every field of the fixtures is understood; eos ids come from generation_config") {
  for (const char* f : {"glm4_moe_lite", "glm4_moe_lite_variant", "glm4_moe"}) {
    auto c = load_config(fixture_dir(f));
    REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().message));
  }
  auto lite = load_config(fixture_dir("glm4_moe_lite")).value();
  const auto& l = std::get<Glm4MoeLiteConfig>(lite.arch);
  CHECK(l.q_lora_rank == 48);
  CHECK(l.kv_lora_rank == 32);
  CHECK(l.rope_interleave);
  CHECK(l.d.layer_is_moe == std::vector<bool>{false, true, true});
  CHECK(l.d.moe.n_group == 2);
  CHECK(l.d.eos_token_ids == std::vector<int>{1, 2});
  auto variant = load_config(fixture_dir("glm4_moe_lite_variant")).value();
  CHECK(std::get<Glm4MoeLiteConfig>(variant.arch).q_lora_rank == 0);  // null: plain q_proj
  auto glm = load_config(fixture_dir("glm4_moe")).value();
  const auto& g = std::get<Glm4MoeConfig>(glm.arch);
  CHECK(g.head_dim == 24);
  CHECK(g.rotary_dim == 12);
  CHECK(g.use_qk_norm);
  CHECK(g.d.layer_is_moe == std::vector<bool>{false, true, true});
}

TEST_CASE("config: generation_config.json's eos ids win over config.json's") {
  TempCopy dir("glm4_moe");
  write_json(dir.path() / "generation_config.json", {{"eos_token_id", 7}, {"do_sample", false}});
  auto c = load_config(dir.path());
  REQUIRE(c.ok());
  CHECK(c->decoder().eos_token_ids == std::vector<int>{7});
}

TEST_CASE("config: unknown architecture") {
  TempCopy dir("glm4_moe");
  edit_config(dir.path(), [](auto& c) { c["model_type"] = "llama"; });
  const auto e = load_error(dir.path());
  CHECK(contains(e, "unknown architecture"));
  CHECK(contains(e, "'llama'"));
  CHECK(contains(e, "glm4_moe_lite"));
}

TEST_CASE("config: fields that change the math and are not implemented are refused") {
  struct Case {
    const char* fixture;
    const char* key;
    nlohmann::json value;
    const char* expect;
  };
  const Case cases[] = {
      {"glm4_moe_lite", "rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}}, "type 'yarn' is not implemented"},
      {"glm4_moe", "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}, "rope_scaling type 'linear'"},
      {"glm4_moe", "rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e4}, {"mscale", 1.0}}, "unknown field 'mscale'"},
      {"glm4_moe", "sliding_window", 128, "unknown field 'sliding_window'"},
      {"glm4_moe_lite", "hidden_act", "gelu", "hidden_act 'gelu'"},
      {"glm4_moe_lite", "topk_method", "greedy", "topk_method 'greedy'"},
      {"glm4_moe_lite", "scoring_func", "softmax", "scoring_func 'softmax'"},
      {"glm4_moe_lite", "partial_rotary_factor", 0.5, "partial_rotary_factor"},
      {"glm4_moe_lite", "first_k_dense_replace", 2, "disagrees with mlp_layer_types"},
      {"glm4_moe", "mlp_layer_types", {"dense", "dense", "sparse"}, "disagrees with mlp_layer_types"},
      {"glm4_moe", "quantization_config", {{"quant_method", "fp8"}}, "per-tensor and per-channel fp8 are not supported"},
      {"glm4_moe", "n_group", 3, "not a multiple of n_group"},
      {"glm4_moe", "num_attention_heads", 3, "multiple of num_key_value_heads"},
  };
  for (const auto& c : cases) {
    TempCopy dir(c.fixture);
    edit_config(dir.path(), [&](auto& cfg) { cfg[c.key] = c.value; });
    const auto e = load_error(dir.path());
    CHECK_MESSAGE(contains(e, c.expect), c.key << " -> " << e);
    CHECK(contains(e, "config.json"));
  }
}

TEST_CASE("config: bookkeeping fields are accepted, and legacy rope fields mean the same") {
  TempCopy dir("glm4_moe");
  edit_config(dir.path(), [](auto& c) {
    c["torch_dtype"] = "bfloat16";
    c["transformers_version"] = "4.56.0";
    c["architectures"] = {"Glm4MoeForCausalLM"};
    c["initializer_range"] = 0.5;
    c["attention_dropout"] = 0.1;
    c["num_nextn_predict_layers"] = 1;
    c["first_k_dense_replace"] = 1;
    c["mlp_layer_types"] = {"dense", "sparse", "sparse"};
    // The pre-v5 spelling of the rotary: top-level rope_theta / partial_rotary_factor, rope_scaling null.
    c.erase("rope_parameters");
    c["rope_theta"] = 10000.0;
    c["partial_rotary_factor"] = 0.5;
    c["rope_scaling"] = nullptr;
  });
  auto m = load_model(dir.path());
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  const auto ours = last_logits(*m.value(), "glm4_moe");
  const auto ref = golden_last_logits("glm4_moe");
  CHECK(relative_error(ours.data(), ref.data(), static_cast<int>(ref.size())) <= 1e-4);
}

TEST_CASE("checkpoint: missing tensor, named") {
  TempCopy dir("glm4_moe_lite");  // sharded: drop one tensor from the index
  auto index = read_json(dir.path() / "model.safetensors.index.json");
  index["weight_map"].erase("model.layers.1.mlp.gate.weight");
  write_json(dir.path() / "model.safetensors.index.json", index);
  const auto e = load_error(dir.path());
  CHECK(contains(e, "missing tensor 'model.layers.1.mlp.gate.weight'"));
  CHECK(contains(e, "[8, 64]"));

  TempCopy single("glm4_moe");  // single file: rename a tensor in the header
  edit_header(single.path() / "model.safetensors", [](auto& h) {
    h["model.layers.0.self_attn.q_norm.weightX"] = h["model.layers.0.self_attn.q_norm.weight"];
    h.erase("model.layers.0.self_attn.q_norm.weight");
  });
  CHECK(contains(load_error(single.path()), "missing tensor 'model.layers.0.self_attn.q_norm.weight'"));
}

TEST_CASE("checkpoint: wrong shape, wrong dtype, truncated file, index pointing at the wrong shard") {
  {
    TempCopy dir("glm4_moe");
    edit_header(dir.path() / "model.safetensors", [](auto& h) { h["model.layers.0.mlp.gate_proj.weight"]["shape"] = {64, 96}; });
    const auto e = load_error(dir.path());
    CHECK(contains(e, "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [64, 96], expected [96, 64]"));
  }
  {
    TempCopy dir("glm4_moe_lite");  // F32 shard; I32 has the same size, so only the dtype is wrong
    edit_header(dir.path() / "model-00001-of-00003.safetensors",
                [](auto& h) { h["model.layers.0.input_layernorm.weight"]["dtype"] = "I32"; });
    const auto e = load_error(dir.path());
    CHECK(contains(e, "tensor 'model.layers.0.input_layernorm.weight' has dtype I32"));
    CHECK(contains(e, "BF16, F16 and F32"));
  }
  {
    TempCopy dir("glm4_moe");
    const auto file = dir.path() / "model.safetensors";
    fs::resize_file(file, fs::file_size(file) - 100);
    const auto e = load_error(dir.path());
    CHECK(contains(e, "truncated"));
    CHECK(contains(e, "model.safetensors"));
    fs::resize_file(file, 6);
    CHECK(contains(load_error(dir.path()), "truncated"));
  }
  {
    TempCopy dir("glm4_moe_lite");
    auto index = read_json(dir.path() / "model.safetensors.index.json");
    index["weight_map"]["model.norm.weight"] = "model-00002-of-00003.safetensors";
    write_json(dir.path() / "model.safetensors.index.json", index);
    CHECK(contains(load_error(dir.path()), "which does not hold it"));
  }
  {
    TempCopy dir("glm4_moe");
    fs::remove(dir.path() / "model.safetensors");
    CHECK(contains(load_error(dir.path()), "no model.safetensors"));
  }
}

TEST_CASE("checkpoint: experts fused into 3-D tensors load like one tensor per expert") {
  // Rewrite the fp16 variant as fp32 with transformers' in-memory expert layout:
  // experts.gate_up_proj [E, 2I, H] (gate rows, then up rows) and experts.down_proj [E, H, I].
  TempCopy dir("glm4_moe_lite_variant");
  const auto file = dir.path() / "model.safetensors";
  auto tensors = read_all(file);
  std::map<std::string, RawTensor> out;
  const int E = 6;
  for (const auto& [name, t] : tensors)
    if (name.find(".experts.") == std::string::npos) out[name] = f32_tensor(t.first, t.second);
  for (int layer : {1}) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    std::vector<float> gate_up, down;
    int64_t I = 0, H = 0;
    for (int e = 0; e < E; ++e) {
      const auto& g = tensors.at(p + std::to_string(e) + ".gate_proj.weight");
      const auto& u = tensors.at(p + std::to_string(e) + ".up_proj.weight");
      const auto& d = tensors.at(p + std::to_string(e) + ".down_proj.weight");
      I = g.first[0];
      H = g.first[1];
      gate_up.insert(gate_up.end(), g.second.begin(), g.second.end());
      gate_up.insert(gate_up.end(), u.second.begin(), u.second.end());
      down.insert(down.end(), d.second.begin(), d.second.end());
    }
    out[p + "gate_up_proj"] = f32_tensor({E, 2 * I, H}, gate_up);
    out[p + "down_proj"] = f32_tensor({E, H, I}, down);
  }
  write_safetensors(file, out);
  auto m = load_model(dir.path());
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  const auto ours = last_logits(*m.value(), "glm4_moe_lite_variant");
  const auto ref = golden_last_logits("glm4_moe_lite_variant");
  CHECK(relative_error(ours.data(), ref.data(), static_cast<int>(ref.size())) <= 1e-4);
}
