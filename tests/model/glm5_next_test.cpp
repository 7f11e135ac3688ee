// glm5_next beyond the golden logits (golden_test.cpp): the linear-attention state across calls.
// Chunked prefill must give the bits of a one-shot prefill (the state is advanced token by token,
// so any split is the same arithmetic), and a snapshot/restore around rejected draft tokens must
// leave the cache bit for bit as if they had never been seen. Also: the config's errors, and the
// state that a store without a recurrent part cannot hold; and the names of the products the CUDA
// model may keep in fp32.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "glm5_next_parts.hpp"
#include "glm5_next_products.hpp"
#include "tandem/model/config.hpp"
#include "tandem/model/cuda_model.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/paged_kv.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;

namespace {

const char* kFixture = "glm5_next_text";

std::vector<int32_t> prompt(size_t i) {
  return read_json(fixture_dir(kFixture) / "golden.json")["sequences"][i]["input_ids"].get<std::vector<int32_t>>();
}

std::vector<int32_t> iota(size_t n, int32_t from) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = from + static_cast<int32_t>(i);
  return p;
}

// Feeds ids[from, to) and returns the logits of every one of them.
std::vector<float> feed(const Model& m, KvCache& cache, const std::vector<int32_t>& ids, size_t from, size_t to) {
  std::vector<int32_t> part(ids.begin() + static_cast<long>(from), ids.begin() + static_cast<long>(to));
  std::vector<int> rows(part.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int>(i);
  auto l = m.forward(part, iota(part.size(), static_cast<int32_t>(from)), cache, rows);
  REQUIRE_MESSAGE(l.ok(), (l.ok() ? "" : l.error().message));
  return l.value();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_cache(KvCache& a, KvCache& b) {
  if (a.length() != b.length() || a.layout() != b.layout()) return false;
  const auto sa = a.recurrent_state(), sb = b.recurrent_state();
  if (std::memcmp(sa.data(), sb.data(), sa.size_bytes()) != 0) return false;
  for (int l = 0; l < a.n_layers(); ++l)
    for (int t = 0; t < a.length(); ++t)
      if (std::memcmp(a.row(l, t), b.row(l, t), static_cast<size_t>(a.row_width()) * sizeof(float)) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("glm5_next: the layout has a recurrent state and caches rows for the attention layers only") {
  auto model = load_model(fixture_dir(kFixture));
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  const KvLayout l = model.value()->kv_layout();
  CHECK(l.n_layers == 2);                      // layers 1 and 3 are sparse attention
  CHECK(l.row_width == 32 + 0 + 2 * 16);       // latent + (no rope) + indexer key and gate
  CHECK(l.state_floats == 2 * (3 * 3 * 32 + 2 * 16 * 16));  // 2 KDA layers: conv history + 2 heads' 16x16
}

TEST_CASE("glm5_next: chunked prefill gives the bits of one-shot prefill, in any split") {
  auto model = load_model(fixture_dir(kFixture));
  REQUIRE(model.ok());
  const Model& m = *model.value();
  const auto ids = prompt(3);  // 70 tokens
  KvCache whole = m.new_cache();
  const auto one_shot = feed(m, whole, ids, 0, ids.size());
  for (const std::vector<size_t>& cuts : {std::vector<size_t>{40}, std::vector<size_t>{1, 2, 3, 17, 64, 69},
                                          std::vector<size_t>{5, 9, 13, 50}}) {
    KvCache chunked = m.new_cache();
    std::vector<float> logits;
    size_t at = 0;
    for (size_t cut : cuts) {
      const auto l = feed(m, chunked, ids, at, cut);
      logits.insert(logits.end(), l.begin(), l.end());
      at = cut;
    }
    const auto rest = feed(m, chunked, ids, at, ids.size());
    logits.insert(logits.end(), rest.begin(), rest.end());
    CHECK(same_bits(logits, one_shot));
    CHECK(same_cache(chunked, whole));
  }
}

TEST_CASE("glm5_next: restoring a snapshot forgets rejected draft tokens bit for bit") {
  auto model = load_model(fixture_dir(kFixture));
  REQUIRE(model.ok());
  const Model& m = *model.value();
  const auto ids = prompt(1);  // 12 tokens: 8 of prompt, then 4 "accepted" tokens
  std::vector<int32_t> drafted = ids;
  drafted[9] = (ids[9] + 7) % m.vocab_size();  // the draft gets token 9 wrong: 9, 10, 11 are rejected
  drafted[10] = (ids[10] + 3) % m.vocab_size();

  KvCache never = m.new_cache();  // never sees the rejected tokens
  feed(m, never, ids, 0, 9);
  const auto clean = feed(m, never, ids, 9, 12);

  KvCache spec = m.new_cache();
  feed(m, spec, ids, 0, 8);
  const KvCache::Snapshot before = spec.snapshot();
  feed(m, spec, drafted, 8, 12);  // verify 4 draft tokens: 8 accepted, 9.. rejected
  CHECK_FALSE(same_cache(spec, never));
  spec.restore(before);
  feed(m, spec, ids, 8, 9);  // re-run the accepted one, then continue with the right tokens
  const auto after = feed(m, spec, ids, 9, 12);
  CHECK(same_bits(after, clean));
  CHECK(same_cache(spec, never));

  // Without the snapshot, truncating the rows alone would keep the rejected tokens in the state.
  KvCache truncated = m.new_cache();
  feed(m, truncated, ids, 0, 8);
  feed(m, truncated, drafted, 8, 12);
  truncated.truncate(9);
  const auto wrong = feed(m, truncated, ids, 9, 12);
  CHECK_FALSE(same_bits(wrong, clean));
}

TEST_CASE("glm5_next: a store without room for the recurrent state is refused") {
  auto model = load_model(fixture_dir(kFixture));
  REQUIRE(model.ok());
  const Model& m = *model.value();
  const KvLayout l = m.kv_layout();
  KvCache no_state(l.n_layers, l.row_width);
  auto r = m.forward(std::vector<int32_t>{5}, std::vector<int32_t>{0}, no_state, std::vector<int>{0});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("cache") != std::string::npos);
}

TEST_CASE("glm5_next config: the text stack is read from text_config or flat, and bad values are named") {
  const auto base = read_json(fixture_dir(kFixture) / "config.json");
  auto flat = parse_config(base, "flat");
  REQUIRE_MESSAGE(flat.ok(), (flat.ok() ? "" : flat.error().message));
  const auto& c = std::get<Glm5NextConfig>(flat.value().arch);
  CHECK(c.layer_is_linear == std::vector<bool>{true, false, true, false});
  CHECK(c.d.layer_is_moe == std::vector<bool>{false, true, true, false});
  CHECK(c.d.swiglu_limit == 1.5);
  CHECK(c.linear_lower_bound == -5.0);
  CHECK(c.hc_mult == 4);
  CHECK(c.index_topk == 128);

  nlohmann::json wrapped = {{"model_type", "glm5_next"}, {"text_config", base}, {"vision_config", {{"depth", 2}}},
                            {"image_token_id", 9}};
  auto w = parse_config(wrapped, "wrapped");
  REQUIRE_MESSAGE(w.ok(), (w.ok() ? "" : w.error().message));
  CHECK(w.value().model_type == "glm5_next");
  CHECK(std::get<Glm5NextConfig>(w.value().arch).layer_is_linear == c.layer_is_linear);

  // Defaults: every 4th layer attention, the first 3 dense, the indexer schedule from its offset.
  nlohmann::json minimal = {{"model_type", "glm5_next_text"}, {"num_hidden_layers", 8}};
  auto d = parse_config(minimal, "minimal");
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error().message));
  const auto& dc = std::get<Glm5NextConfig>(d.value().arch);
  CHECK(dc.layer_is_linear == std::vector<bool>{true, true, true, false, true, true, true, false});
  CHECK(dc.d.layer_is_moe == std::vector<bool>{false, false, false, true, true, true, true, true});
  CHECK(dc.linear_lower_bound == -5.0);
  CHECK(dc.d.swiglu_limit == 10.0);

  // linear_attn_config (the original spelling) wins over the flat fields.
  auto la = base;
  la["linear_attn_config"] = {{"num_heads", 4}, {"head_dim", 8}, {"short_conv_kernel_size", 3}, {"lower_bound", nullptr}};
  auto lac = parse_config(la, "la");
  REQUIRE_MESSAGE(lac.ok(), (lac.ok() ? "" : lac.error().message));
  CHECK(std::get<Glm5NextConfig>(lac.value().arch).linear_num_heads == 4);
  CHECK(std::get<Glm5NextConfig>(lac.value().arch).linear_conv_kernel_dim == 3);
  CHECK_FALSE(std::get<Glm5NextConfig>(lac.value().arch).linear_lower_bound.has_value());

  auto expect_error = [&](nlohmann::json doc, const std::string& needle) {
    auto r = parse_config(doc, "bad");
    REQUIRE_FALSE(r.ok());
    CHECK_MESSAGE(r.error().message.find(needle) != std::string::npos, r.error().message);
  };
  auto bad = base;
  bad["layer_types"][1] = "sliding_attention";
  expect_error(bad, "layer_types[1]");
  bad = base;
  bad["index_topk"] = 10;
  expect_error(bad, "divisible by index_kpool");
  bad = base;
  bad["indexer_types"] = {"full", "shared", "full", "full"};
  expect_error(bad, "shared indexer");
  bad = base;
  bad["swiglu_limit"] = nullptr;
  expect_error(bad, "swiglu_limit");
  bad = base;
  bad["num_key_value_heads"] = 2;
  expect_error(bad, "num_key_value_heads");
  bad = base;
  bad["q_lora_rank"] = nullptr;
  expect_error(bad, "q_lora_rank");
  bad = base;
  bad["hc_fancy"] = 1;
  expect_error(bad, "hc_fancy");
  nlohmann::json vis = {{"model_type", "glm5_next"}, {"text_config", {{"model_type", "glm4_moe"}}}};
  expect_error(vis, "text_config has model_type");
}

TEST_CASE("glm5_next: the CUDA model's fp32 products are named and parsed") {
  using detail::Glm5Product;
  const unsigned n = static_cast<unsigned>(Glm5Product::count);
  auto bit = [](Glm5Product p) { return 1u << static_cast<unsigned>(p); };
  CHECK(detail::glm5_fp32_products("all").value() == (1u << n) - 1);
  CHECK(detail::glm5_fp32_products("none").value() == 0u);
  CHECK(detail::glm5_fp32_products("lm_head,kda_o").value() == (bit(Glm5Product::lm_head) | bit(Glm5Product::kda_o)));
  for (unsigned i = 0; i < n; ++i)  // every name parses back to its own bit
    CHECK(detail::glm5_fp32_products(detail::glm5_product_name(static_cast<Glm5Product>(i))).value() == 1u << i);
  // The default keeps all but the output projections (engine/bench/results/glm5-next-bf16-inputs-2026-12-06.md).
  const unsigned bf16 = bit(Glm5Product::kda_o) | bit(Glm5Product::dsa_o) | bit(Glm5Product::mlp_down) | bit(Glm5Product::shared_down);
  CHECK(detail::glm5_fp32_products(detail::kGlm5Fp32Default).value() == (((1u << n) - 1) & ~bf16));
  auto bad = detail::glm5_fp32_products("kda_in,attention");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("no product \"attention\"") != std::string::npos);
  CHECK(bad.error().message.find("shared_down") != std::string::npos);  // the names it knows
  CHECK_FALSE(detail::glm5_fp32_products("kda_in,").ok());                // an empty name
}

TEST_CASE("glm5_next: kv_cache_dtype picks the DSA pool's type, and a pool it cannot hold is named") {
  using tandem::kernels::DType;
  CHECK(detail::dsa_pool_type("auto").value() == DType::f32);  // the fixtures' bars need fp32 rows
  CHECK(detail::dsa_pool_type("float32").value() == DType::f32);
  CHECK(detail::dsa_pool_type("bfloat16").value() == DType::bf16);
  CHECK(detail::dsa_pool_type("fp8").value() == DType::fp8_e4m3);
  CHECK(detail::dsa_pool_type("fp8_e4m3").value() == DType::fp8_e4m3);  // the seed's flag
  auto bad = detail::dsa_pool_type("fp8_e5m2");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("fp8_e5m2") != std::string::npos);
  CHECK(bad.error().message.find("bfloat16") != std::string::npos);
}

// The CPU reference of the CUDA model's bf16 / fp8 DSA pools: rows that stand for such a pool hold
// values of that type and the logits move (the rounding is really applied); bf16 rows' stay near fp32 rows'.
TEST_CASE("glm5_next: rows that stand for a bf16 or fp8 pool hold that type's values") {
  using tandem::kernels::DType;
  auto model = load_model(fixture_dir(kFixture));
  REQUIRE(model.ok());
  const Model& m = *model.value();
  const auto ids = prompt(3);  // 70 tokens
  KvCache exact = m.new_cache();
  const auto want = feed(m, exact, ids, 0, ids.size());
  // An fp8 pool at the scales the CUDA model calculates from the first step's rows (this prompt's):
  // each layer's amax at kFp8KvAmaxTarget. This fixture's rows are O(1) (normed latents, keys and
  // gate scores of 0.0005..3.9), so the scale moves little; e4m3's 3 mantissa bits do: its logits
  // move by 0.76 of the largest (0.45 at scale 1; a plain 3-bit mantissa rounding without e4m3's
  // range limits gives the same 0.45), where bf16 rows move them by 2.9e-3. The tiny random model
  // amplifies rounding: printed, not held to a bar (the CUDA check holds the device to this
  // reference instead).
  std::vector<float> scales;
  for (int l = 0; l < exact.n_layers(); ++l) {
    float amax = 0;
    for (int j = 0; j < exact.length(); ++j)
      for (int i = 0; i < exact.row_width(); ++i) amax = std::max(amax, std::fabs(exact.row(l, j)[i]));
    scales.push_back(fp8_kv_scale_from_amax(amax));
  }
  for (const DType t : {DType::bf16, DType::fp8_e4m3}) {
    CAPTURE(tandem::kernels::dtype_name(t));
    KvCache rounded = m.new_cache();
    rounded.emulate_rows(t, t == DType::fp8_e4m3 ? scales : std::vector<float>{});
    const auto got = feed(m, rounded, ids, 0, ids.size());
    int off_type = 0;
    for (int l = 0; l < rounded.n_layers(); ++l)
      for (int j = 0; j < rounded.length(); ++j)
        for (int i = 0; i < rounded.row_width(); ++i) {
          const float x = rounded.row(l, j)[i];
          off_type += tandem::kernels::round_to(t, x, t == DType::fp8_e4m3 ? scales[static_cast<size_t>(l)] : 1.f) != x;
        }
    CHECK(off_type == 0);
    CHECK_FALSE(same_bits(got, want));
    double diff = 0, big = 0;
    for (size_t i = 0; i < want.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i]))), big = std::max(big, static_cast<double>(std::fabs(want[i])));
    if (t == DType::bf16) CHECK(diff / big < 1e-2);
    MESSAGE(std::string(tandem::kernels::dtype_name(t)) << " rows: logits " << diff / big << " of the largest from fp32 rows'");
  }
}
