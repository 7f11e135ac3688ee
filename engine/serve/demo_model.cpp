#include "demo_model.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo_assets.hpp"

namespace tandem::engine::serve {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

// Shape of the demo model: small enough to write in milliseconds and to decode quickly on one CPU
// core, but with every part of glm4_moe_lite present (query LoRA, MLA, a dense layer, a MoE layer
// with a shared expert and grouped routing).
constexpr int kHidden = 64, kLayers = 2, kHeads = 4, kQLora = 32, kKvLora = 32, kNope = 16, kRope = 8, kV = 16;
constexpr int kDenseInter = 96, kExperts = 4, kPerTok = 2, kMoeInter = 32, kShared = 1, kVocab = 640, kMaxPos = 4096;

// Tokens GLM's chat format needs that the small test tokenizer lacks; appended after its vocabulary.
// Role and prompt tokens are special (skipped when decoding); tool-call tags are not, so the
// parsers see them in the text.
struct Added {
  const char* content;
  bool special;
};
constexpr Added kAdded[] = {{"[gMASK]", true},        {"<sop>", true},          {"<|system|>", true},
                            {"<|user|>", true},       {"<|assistant|>", true},  {"<|observation|>", true},
                            {"<tool_call>", false},   {"</tool_call>", false},  {"<arg_key>", false},
                            {"</arg_key>", false},    {"<arg_value>", false},   {"</arg_value>", false},
                            {"<tool_response>", false}, {"</tool_response>", false}};

// Portable seeded normals: splitmix64 bits and Box-Muller, not std::normal_distribution, whose
// algorithm differs between standard libraries.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  float normal(float stddev) {
    const double u1 = uniform(), u2 = uniform();
    return static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t s_;
};

struct Tensor {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

class Weights {
 public:
  explicit Weights(std::uint64_t seed) : rng_(seed) {}
  void random(const std::string& name, std::vector<std::int64_t> shape, float stddev) {
    Tensor t{std::move(shape), {}};
    t.data.resize(count(t.shape));
    for (auto& x : t.data) x = rng_.normal(stddev);
    tensors_[name] = std::move(t);
  }
  void fill(const std::string& name, std::vector<std::int64_t> shape, float value) {
    Tensor t{std::move(shape), {}};
    t.data.assign(count(t.shape), value);
    tensors_[name] = std::move(t);
  }
  // safetensors: 8-byte little-endian header length, JSON header padded to 8 bytes, then data.
  std::string serialize() const {
    ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    std::size_t offset = 0;
    for (const auto& [name, t] : tensors_) {
      const std::size_t bytes = t.data.size() * sizeof(float);
      header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    out += h;
    for (const auto& [name, t] : tensors_) {
      // The CPU targets here are little-endian, as the format is.
      out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
    }
    return out;
  }

 private:
  static std::size_t count(const std::vector<std::int64_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
  Rng rng_;
  std::map<std::string, Tensor> tensors_;  // sorted names: stable file layout
};

Weights make_weights(std::uint64_t seed) {
  Weights w(seed);
  // Larger embeddings than projections give the random model somewhat peaked, varied logits.
  w.random("model.embed_tokens.weight", {kVocab, kHidden}, 1.0f);
  w.random("lm_head.weight", {kVocab, kHidden}, 0.5f);
  w.fill("model.norm.weight", {kHidden}, 1.0f);
  const float s = 0.08f;
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w.fill(p + "input_layernorm.weight", {kHidden}, 1.0f);
    w.fill(p + "post_attention_layernorm.weight", {kHidden}, 1.0f);
    const std::string a = p + "self_attn.";
    w.random(a + "q_a_proj.weight", {kQLora, kHidden}, s);
    w.fill(a + "q_a_layernorm.weight", {kQLora}, 1.0f);
    w.random(a + "q_b_proj.weight", {kHeads * (kNope + kRope), kQLora}, s);
    w.random(a + "kv_a_proj_with_mqa.weight", {kKvLora + kRope, kHidden}, s);
    w.fill(a + "kv_a_layernorm.weight", {kKvLora}, 1.0f);
    w.random(a + "kv_b_proj.weight", {kHeads * (kNope + kV), kKvLora}, s);
    w.random(a + "o_proj.weight", {kHidden, kHeads * kV}, s);
    const std::string m = p + "mlp.";
    if (l == 0) {  // mlp_layer_types[0] == "dense"
      w.random(m + "gate_proj.weight", {kDenseInter, kHidden}, s);
      w.random(m + "up_proj.weight", {kDenseInter, kHidden}, s);
      w.random(m + "down_proj.weight", {kHidden, kDenseInter}, s);
      continue;
    }
    w.random(m + "gate.weight", {kExperts, kHidden}, s);
    w.fill(m + "gate.e_score_correction_bias", {kExperts}, 0.0f);
    for (int e = 0; e < kExperts; ++e) {
      const std::string ep = m + "experts." + std::to_string(e) + ".";
      w.random(ep + "gate_proj.weight", {kMoeInter, kHidden}, s);
      w.random(ep + "up_proj.weight", {kMoeInter, kHidden}, s);
      w.random(ep + "down_proj.weight", {kHidden, kMoeInter}, s);
    }
    w.random(m + "shared_experts.gate_proj.weight", {kMoeInter * kShared, kHidden}, s);
    w.random(m + "shared_experts.up_proj.weight", {kMoeInter * kShared, kHidden}, s);
    w.random(m + "shared_experts.down_proj.weight", {kHidden, kMoeInter * kShared}, s);
  }
  return w;
}

ordered_json config_json(const std::vector<int>& eos) {
  return {{"architectures", {"Glm4MoeLiteForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"dtype", "float32"},
          {"eos_token_id", eos},
          {"hidden_act", "silu"},
          {"hidden_size", kHidden},
          {"initializer_range", 0.02},
          {"intermediate_size", kDenseInter},
          {"kv_lora_rank", kKvLora},
          {"max_position_embeddings", kMaxPos},
          {"mlp_layer_types", {"dense", "sparse"}},
          {"model_type", "glm4_moe_lite"},
          {"moe_intermediate_size", kMoeInter},
          {"n_group", 1},
          {"n_routed_experts", kExperts},
          {"n_shared_experts", kShared},
          {"norm_topk_prob", true},
          {"num_attention_heads", kHeads},
          {"num_experts_per_tok", kPerTok},
          {"num_hidden_layers", kLayers},
          {"num_key_value_heads", kHeads},
          {"pad_token_id", eos.front()},
          {"q_lora_rank", kQLora},
          {"qk_head_dim", kNope + kRope},
          {"qk_nope_head_dim", kNope},
          {"qk_rope_head_dim", kRope},
          {"rms_norm_eps", 1e-5},
          {"rope_interleave", true},
          {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}},
          {"routed_scaling_factor", 1.8},
          {"tie_word_embeddings", false},
          {"topk_group", 1},
          {"use_cache", true},
          {"v_head_dim", kV},
          {"vocab_size", kVocab}};
}

tandem::Status write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return model::error("cannot write " + path.string() + ": " + std::strerror(errno));
  return tandem::Ok{};
}

}  // namespace

tandem::Status write_demo_model(const fs::path& dir, unsigned long long seed) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return model::error("cannot create " + dir.string() + ": " + ec.message());

  auto tok = ordered_json::parse(demo_base_tokenizer_json());
  int next_id = 0;
  for (const auto& t : tok["added_tokens"]) next_id = std::max(next_id, t["id"].get<int>() + 1);
  for (const auto& [token, value] : tok["model"]["vocab"].items()) next_id = std::max(next_id, value.get<int>() + 1);
  std::map<std::string, int> ids;
  for (const auto& a : kAdded) {
    ids[a.content] = next_id;
    tok["added_tokens"].push_back({{"id", next_id++}, {"content", a.content}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", a.special}});
  }
  if (next_id > kVocab) return model::error("demo tokenizer has " + std::to_string(next_id) + " ids, the model " + std::to_string(kVocab));
  // As GLM's tokenizer does: a plain prompt (completions) starts with [gMASK]<sop>; chat templates
  // write those themselves and are encoded without special tokens.
  auto special = [&](const std::string& s) { return ordered_json{{"id", s}, {"ids", {ids[s]}}, {"tokens", {s}}}; };
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "[gMASK]"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "<sop>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", {{{"SpecialToken", {{"id", "[gMASK]"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "<sop>"}, {"type_id", 0}}}},
                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens", {{"[gMASK]", special("[gMASK]")}, {"<sop>", special("<sop>")}}}};

  int endoftext = -1;
  for (const auto& t : tok["added_tokens"])
    if (t["content"] == "<|endoftext|>") endoftext = t["id"].get<int>();
  if (endoftext < 0) return model::error("the embedded demo tokenizer has no <|endoftext|> token");
  // GLM stops at end of text, and when the model starts the next user or tool turn.
  const std::vector<int> eos = {endoftext, ids["<|user|>"], ids["<|observation|>"]};

  const ordered_json tok_config = {{"eos_token", "<|endoftext|>"},
                                   {"pad_token", "<|endoftext|>"},
                                   {"clean_up_tokenization_spaces", false},
                                   {"model_max_length", kMaxPos},
                                   {"tokenizer_class", "PreTrainedTokenizerFast"}};
  const ordered_json gen_config = {{"eos_token_id", eos}, {"pad_token_id", endoftext}, {"do_sample", true},
                                   {"temperature", 1.0}, {"top_p", 1.0}};

  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{{"config.json", config_json(eos).dump(2) + "\n"},
                                                        {"generation_config.json", gen_config.dump(2) + "\n"},
                                                        {"tokenizer.json", tok.dump(2) + "\n"},
                                                        {"tokenizer_config.json", tok_config.dump(2) + "\n"},
                                                        {"chat_template.jinja", std::string(demo_chat_template()) + "\n"},
                                                        {"model.safetensors", make_weights(seed).serialize()}}) {
    if (auto s = write_file(dir / name, text); !s) return s.error();
  }
  return tandem::Ok{};
}

}  // namespace tandem::engine::serve
