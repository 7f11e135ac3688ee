#include "drafter_fixture.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>

#include "../model/test_util.hpp"
#include "demo_model.hpp"

namespace tandem::spec::test {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& tag) {
  static int n = 0;
  path_ = fs::temp_directory_path() / (tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}
TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_random_drafter(const fs::path& dir, const model::ModelConfig& target, std::vector<int> layers, int block_size,
                          unsigned seed) {
  const auto& d = target.decoder();
  const int H = d.hidden_size, V = d.vocab_size, L = 2, heads = 4, kv = 2, hd = 16, I = 96;
  fs::create_directories(dir);
  nlohmann::json cfg = {{"architectures", {"DFlashDraftModel"}},
                        {"model_type", "qwen3"},
                        {"hidden_size", H},
                        {"num_hidden_layers", L},
                        {"num_attention_heads", heads},
                        {"num_key_value_heads", kv},
                        {"head_dim", hd},
                        {"intermediate_size", I},
                        {"vocab_size", V},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", 10000.0},
                        {"hidden_act", "silu"},
                        {"attention_bias", false},
                        {"tie_word_embeddings", false},
                        {"num_target_layers", d.num_hidden_layers},
                        {"dflash_config", {{"block_size", block_size}, {"mask_token_id", V - 1}, {"target_layer_ids", layers}}}};
  model::test::write_json(dir / "config.json", cfg);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::map<std::string, model::test::RawTensor> t;
  auto rnd = [&](const std::string& name, std::vector<int64_t> shape) {
    const int64_t fan_in = shape.back();
    std::vector<float> v(static_cast<size_t>(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
    for (auto& x : v) x = normal(rng) / std::sqrt(static_cast<float>(fan_in));
    t[name] = model::test::f32_tensor(shape, v);
  };
  auto ones = [&](const std::string& name, int64_t n) { t[name] = model::test::f32_tensor({n}, std::vector<float>(static_cast<size_t>(n), 1.f)); };
  rnd("fc.weight", {H, static_cast<int64_t>(layers.size()) * H});
  ones("hidden_norm.weight", H);
  ones("norm.weight", H);
  for (int l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    ones(p + "input_layernorm.weight", H);
    ones(p + "post_attention_layernorm.weight", H);
    rnd(p + "self_attn.q_proj.weight", {heads * hd, H});
    rnd(p + "self_attn.k_proj.weight", {kv * hd, H});
    rnd(p + "self_attn.v_proj.weight", {kv * hd, H});
    rnd(p + "self_attn.o_proj.weight", {H, heads * hd});
    ones(p + "self_attn.q_norm.weight", hd);
    ones(p + "self_attn.k_norm.weight", hd);
    rnd(p + "mlp.gate_proj.weight", {I, H});
    rnd(p + "mlp.up_proj.weight", {I, H});
    rnd(p + "mlp.down_proj.weight", {H, I});
  }
  model::test::write_safetensors(dir / "model.safetensors", t);
}

DemoPair::DemoPair() {
  target = dir.path() / "target";
  drafter = dir.path() / "drafter";
  auto s = engine::serve::write_demo_model(target);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  auto cfg = model::load_config(target);
  REQUIRE(cfg.ok());
  write_random_drafter(drafter, cfg.value(), {0, 1}, 8, 7);
  drafter_config = model::test::read_json(drafter / "config.json");
}

OracleDrafter::OracleDrafter(const model::Model& target, std::vector<Sequence> seqs, int max_draft)
    : hidden_(target.config().decoder().hidden_size), vocab_(target.vocab_size()), max_(max_draft), seqs_(std::move(seqs)) {
  for (const auto& s : seqs_) {
    model::KvCache c = target.new_cache();
    model::HiddenCapture cap;
    cap.layers = layers_;
    const std::int32_t tok = s.tokens.at(0), pos = 0;
    REQUIRE(target.forward(std::span(&tok, 1), std::span(&pos, 1), c, {}, &cap).ok());
    tags_.push_back(cap.rows.at(0));
  }
}

Status OracleDrafter::add_context(std::span<const float> features, std::span<const int> positions, model::KvSequence& ctx) const {
  if (auto s = ctx.append(positions); !s) return s.error();
  const int first = ctx.length() - static_cast<int>(positions.size());
  for (size_t t = 0; t < positions.size(); ++t) *ctx.row(0, first + static_cast<int>(t)) = features[t * static_cast<size_t>(hidden_)];
  return tandem::Ok{};
}

Result<std::vector<float>> OracleDrafter::propose(model::KvSequence& ctx, std::int32_t, int pos, int n) const {
  const float tag = *ctx.row(0, 0);
  size_t which = 0;
  for (size_t i = 1; i < tags_.size(); ++i)
    if (std::fabs(tags_[i] - tag) < std::fabs(tags_[which] - tag)) which = i;
  const Sequence& s = seqs_[which];
  std::vector<int> block;
  for (int t = 0; t <= n; ++t) block.push_back(pos + t);
  if (auto st = ctx.append(block); !st) return st.error();
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(vocab_), 0.f);
  for (int i = 0; i < n; ++i) {
    const size_t at = static_cast<size_t>(pos + 1 + i);
    std::int32_t tok = at < s.tokens.size() ? s.tokens[at] : 0;
    if (i == s.wrong_at) tok = (tok + 1) % vocab_;
    logits[static_cast<size_t>(i) * static_cast<size_t>(vocab_) + static_cast<size_t>(tok)] = 10.f;
  }
  return logits;
}

}  // namespace tandem::spec::test
