// tandem-random-checkpoint's writer (engine/bench/random_checkpoint.hpp) at tiny dimensions: the
// fp8 and NVFP4 checkpoints it writes straight (no bf16 copy) load through the ordinary loader and
// run a forward with finite logits; their projections are quantised as tandem-quantize would
// store them, with the init std asked for; and the bytes do not depend on the thread count (the
// workers write disjoint ranges at precomputed offsets). The same for glm5_next_text's layout
// (--model glm5_next), whose CUDA model keeps it quantised (glm5_next_cuda_check).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "random_checkpoint.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/safetensors.hpp"

using namespace tandem::model;
namespace b = tandem::model::bench;

namespace {

// GLM-4.7-Flash's config with 2 layers and small widths, every projection a multiple of 128 wide.
nlohmann::json tiny_config() {
  auto c = b::glm47_flash_config(2);
  c["vocab_size"] = 512, c["hidden_size"] = 256, c["intermediate_size"] = 512, c["moe_intermediate_size"] = 128;
  c["num_attention_heads"] = 4, c["num_key_value_heads"] = 4, c["q_lora_rank"] = 128, c["kv_lora_rank"] = 128;
  c["qk_nope_head_dim"] = 64, c["v_head_dim"] = 64, c["n_routed_experts"] = 8, c["num_experts_per_tok"] = 2;
  return c;
}

struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("tandem-random-ckpt-" + std::to_string(::getpid()));
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void loads_and_runs(b::QuantizeAs as) {
  TempDir tmp;
  const auto dir = tmp.path / "m";
  b::RandomCheckpointStats st;
  const std::string e = b::write_random_checkpoint(dir, tiny_config(), as, 7, 3, &st);
  REQUIRE_MESSAGE(e.empty(), e);
  // Per layer q_a, q_b, kv_a, kv_b, o; the dense layer's 3; the MoE layer's 8 x 3 experts and 3 shared.
  CHECK(st.quantised == 5 + 3 + 5 + 8 * 3 + 3);
  CHECK(st.bytes == std::filesystem::file_size(dir / "model.safetensors"));

  auto ck = Checkpoint::open(dir);
  REQUIRE_MESSAGE(ck.ok(), (ck.ok() ? "" : ck.error().message));
  const std::string expert = "model.layers.1.mlp.experts.3.down_proj.weight";
  const TensorInfo* t = ck->find(expert);
  REQUIRE(t != nullptr);
  CHECK(t->dtype == (as == b::QuantizeAs::fp8_block ? "F8_E4M3" : "U8"));
  auto w = ck->read(expert, {256, 128});
  REQUIRE(w.ok());
  double sum = 0, sq = 0;
  for (float x : *w) sum += x, sq += static_cast<double>(x) * x;
  const double n = static_cast<double>(w->size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  CHECK(std::fabs(mean) < 1e-3);
  CHECK(sd == doctest::Approx(0.02).epsilon(0.1));  // NVFP4's 4-bit values move it by a few percent
  auto norm = ck->read("model.layers.0.input_layernorm.weight", {256});
  REQUIRE(norm.ok());
  CHECK((*norm)[17] == 1.f);
  CHECK(ck->find("model.embed_tokens.weight")->dtype == "BF16");

  auto m = load_model(dir);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  const std::vector<int32_t> ids{5, 77, 300, 2, 511, 9}, pos{0, 1, 2, 3, 4, 5};
  KvCache cache = m.value()->new_cache();
  auto logits = m.value()->forward(ids, pos, cache, std::vector<int>{5});
  REQUIRE_MESSAGE(logits.ok(), (logits.ok() ? "" : logits.error().message));
  REQUIRE(logits->size() == 512);
  float lo = INFINITY, hi = -INFINITY;
  for (float x : *logits) {
    REQUIRE(std::isfinite(x));
    lo = std::min(lo, x), hi = std::max(hi, x);
  }
  CHECK(hi > lo);
}

// glm5_next_text's defaults at 4 layers (3 KDA, then a DSA layer with its indexer and routed
// experts) and small widths.
nlohmann::json tiny_glm5_config() {
  auto c = b::glm5_next_config(4, 8);
  c["vocab_size"] = 512, c["hidden_size"] = 128, c["intermediate_size"] = 256, c["moe_intermediate_size"] = 64;
  c["num_attention_heads"] = 2, c["num_key_value_heads"] = 2, c["q_lora_rank"] = 64, c["kv_lora_rank"] = 64;
  c["qk_nope_head_dim"] = 32, c["qk_head_dim"] = 32, c["v_head_dim"] = 32, c["num_experts_per_tok"] = 2;
  c["index_n_heads"] = 2, c["index_head_dim"] = 32, c["index_kpool"] = 4, c["index_topk"] = 8;
  c["linear_num_heads"] = 2, c["linear_head_dim"] = 32, c["max_position_embeddings"] = 256;
  return c;
}

void glm5_loads_and_runs(b::QuantizeAs as) {
  TempDir tmp;
  const auto dir = tmp.path / "g5";
  b::RandomCheckpointStats st;
  const std::string e = b::write_random_checkpoint(dir, tiny_glm5_config(), as, 5, 3, &st);
  REQUIRE_MESSAGE(e.empty(), e);
  // KDA layers: q, k, v, f_a, f_b, b, g_a, g_b, o; the DSA layer: q_a, q_b, kv_a, kv_b, o and the
  // indexer's wq_b, wk, weights_proj; 3 dense MLPs of 3; 8 x 3 experts and 3 shared.
  CHECK(st.quantised == 3 * 9 + 8 + 3 * 3 + 8 * 3 + 3);
  auto ck = Checkpoint::open(dir);
  REQUIRE_MESSAGE(ck.ok(), (ck.ok() ? "" : ck.error().message));
  CHECK(ck->find("model.layers.0.self_attn.g_b_proj.weight")->dtype == (as == b::QuantizeAs::fp8_block ? "F8_E4M3" : "U8"));
  CHECK(ck->find("model.layers.0.self_attn.conv1d.weight")->shape == std::vector<int64_t>{192, 1, 4});
  auto m = load_model(dir);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  const std::vector<int32_t> ids{5, 77, 300, 2, 511, 9, 40, 41, 42, 43}, pos{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  KvCache cache = m.value()->new_cache();
  auto logits = m.value()->forward(ids, pos, cache, std::vector<int>{9});
  REQUIRE_MESSAGE(logits.ok(), (logits.ok() ? "" : logits.error().message));
  REQUIRE(logits->size() == 512);
  float lo = INFINITY, hi = -INFINITY;
  for (float x : *logits) {
    REQUIRE(std::isfinite(x));
    lo = std::min(lo, x), hi = std::max(hi, x);
  }
  CHECK(hi > lo);
}

}  // namespace

TEST_CASE("random fp8 and NVFP4 checkpoints of glm5_next_text's layout: load and run") {
  glm5_loads_and_runs(b::QuantizeAs::fp8_block);
  glm5_loads_and_runs(b::QuantizeAs::nvfp4);
}

TEST_CASE("random fp8 checkpoint of GLM-4.7-Flash's layout: loads, runs, init std 0.02") { loads_and_runs(b::QuantizeAs::fp8_block); }

TEST_CASE("random NVFP4 checkpoint of GLM-4.7-Flash's layout: loads, runs, init std 0.02") { loads_and_runs(b::QuantizeAs::nvfp4); }

TEST_CASE("random checkpoint: the same seed gives the same bytes whatever the thread count") {
  TempDir tmp;
  REQUIRE(b::write_random_checkpoint(tmp.path / "a", tiny_config(), b::QuantizeAs::nvfp4, 11, 1).empty());
  REQUIRE(b::write_random_checkpoint(tmp.path / "b", tiny_config(), b::QuantizeAs::nvfp4, 11, 4).empty());
  REQUIRE(b::write_random_checkpoint(tmp.path / "c", tiny_config(), b::QuantizeAs::nvfp4, 12, 4).empty());
  const std::string a = file_bytes(tmp.path / "a" / "model.safetensors");
  CHECK(a.size() > 1000000);
  CHECK(a == file_bytes(tmp.path / "b" / "model.safetensors"));
  CHECK(a != file_bytes(tmp.path / "c" / "model.safetensors"));
}
