// The CPU reference forward against transformers 5.17 (fixtures/<case>/golden.*, made by
// reference/make_fixtures.py): per position, relative error = max|ours - theirs| / max|theirs| over
// the vocabulary must be <= 1e-4; greedy continuations (16 tokens, KV cache) must be identical;
// prefill-then-decode must give the logits of a full prefill.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>

#include "tandem/model/model.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;

namespace {

constexpr double kGoldenTolerance = 1e-4;
constexpr double kCacheTolerance = 1e-5;  // our own prefill vs decode: same math, other op order only

struct Sequence {
  std::vector<int32_t> ids, greedy;
  std::vector<float> logits;  // [ids.size() x vocab]
};

std::vector<Sequence> golden(const std::string& fixture) {
  const auto doc = read_json(fixture_dir(fixture) / "golden.json");
  const auto tensors = read_all(fixture_dir(fixture) / "golden.safetensors");
  std::vector<Sequence> out;
  for (size_t i = 0; i < doc["sequences"].size(); ++i) {
    Sequence s;
    s.ids = doc["sequences"][i]["input_ids"].get<std::vector<int32_t>>();
    s.greedy = doc["sequences"][i]["greedy"].get<std::vector<int32_t>>();
    s.logits = tensors.at("seq" + std::to_string(i) + ".logits").second;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<int32_t> iota_positions(size_t n, int32_t from = 0) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = from + static_cast<int32_t>(i);
  return p;
}

std::vector<int> all_rows(size_t n) {
  std::vector<int> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = static_cast<int>(i);
  return r;
}

// Full-prefill logits of every position.
std::vector<float> prefill(const Model& m, const std::vector<int32_t>& ids) {
  KvCache cache = m.new_cache();
  auto logits = m.forward(ids, iota_positions(ids.size()), cache, all_rows(ids.size()));
  REQUIRE_MESSAGE(logits.ok(), (logits.ok() ? "" : logits.error().message));
  CHECK(cache.length() == static_cast<int>(ids.size()));
  return logits.value();
}

void check_fixture(const std::string& fixture) {
  auto model = load_model(fixture_dir(fixture));
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().message));
  const Model& m = *model.value();
  const int V = m.vocab_size();
  double worst = 0;
  for (const auto& seq : golden(fixture)) {
    const auto ours = prefill(m, seq.ids);
    REQUIRE(ours.size() == seq.logits.size());
    for (size_t t = 0; t < seq.ids.size(); ++t) {
      const double err = relative_error(ours.data() + t * static_cast<size_t>(V), seq.logits.data() + t * static_cast<size_t>(V), V);
      worst = std::max(worst, err);
      CHECK_MESSAGE(err <= kGoldenTolerance, fixture << " position " << t << ": relative error " << err);
    }

    auto greedy = greedy_generate(m, seq.ids, static_cast<int>(seq.greedy.size()));
    REQUIRE(greedy.ok());
    CHECK(greedy.value() == seq.greedy);

    // Prefill half, then decode the rest one token at a time; then the same in chunks of 3.
    for (size_t chunk : {size_t{1}, size_t{3}}) {
      KvCache cache = m.new_cache();
      const size_t half = seq.ids.size() / 2;
      std::vector<float> stepwise;
      for (size_t at = 0; at < seq.ids.size();) {
        const size_t n = at == 0 ? std::max<size_t>(half, 1) : std::min(chunk, seq.ids.size() - at);
        std::vector<int32_t> ids(seq.ids.begin() + static_cast<long>(at), seq.ids.begin() + static_cast<long>(at + n));
        auto l = m.forward(ids, iota_positions(n, static_cast<int32_t>(at)), cache, all_rows(n));
        REQUIRE(l.ok());
        stepwise.insert(stepwise.end(), l.value().begin(), l.value().end());
        at += n;
      }
      for (size_t t = 0; t < seq.ids.size(); ++t)
        CHECK(relative_error(stepwise.data() + t * static_cast<size_t>(V), ours.data() + t * static_cast<size_t>(V), V) <=
              kCacheTolerance);
    }
  }
  std::printf("%s: max relative logit error vs transformers %.3g (bound %.0e)\n", fixture.c_str(), worst, kGoldenTolerance);
  MESSAGE(fixture << ": max relative logit error " << worst);
}

}  // namespace

TEST_CASE("glm4_moe_lite matches transformers (MLA, q LoRA, interleaved rotary, grouped routing, fp32 shards)") {
  check_fixture("glm4_moe_lite");
}

TEST_CASE("glm4_moe_lite variant matches transformers (q_proj, rotate-half rotary, biases, no renorm, fp16)") {
  check_fixture("glm4_moe_lite_variant");
}

TEST_CASE("glm4_moe matches transformers (GQA, partial rotary, qk-norm, qkv bias, bf16)") {
  check_fixture("glm4_moe");
}

TEST_CASE("glm5_next_text matches transformers (KDA linear attention, DSA + indexer, hyper-connections, clamped SwiGLU MoE, bf16)") {
  check_fixture("glm5_next_text");
}

TEST_CASE("glm5_next_text with a sparse indexer matches transformers (top-k 8 of k-pools of 4, tail, 16 index heads)") {
  // index_topk 8 < every long sequence: the indexer drops keys (the fixture's logits differ from a
  // keep-everything indexer's by up to 3.4), and its top-k boundaries fall between distinct scores
  // (golden.json: indexer_ties 0), so the selection, not a sort order, is what is checked.
  REQUIRE(read_json(fixture_dir("glm5_next_text_sparse") / "golden.json").value("indexer_ties", -1) == 0);
  check_fixture("glm5_next_text_sparse");
}

TEST_CASE("logits can be asked for a subset of rows, and a cache can be truncated and refilled") {
  auto model = load_model(fixture_dir("glm4_moe"));
  REQUIRE(model.ok());
  const Model& m = *model.value();
  const int V = m.vocab_size();
  const auto seq = golden("glm4_moe")[1];
  const auto full = prefill(m, seq.ids);
  KvCache cache = m.new_cache();
  const std::vector<int> rows{4, 0};
  auto some = m.forward(seq.ids, iota_positions(seq.ids.size()), cache, rows);
  REQUIRE(some.ok());
  REQUIRE(some.value().size() == 2 * static_cast<size_t>(V));
  CHECK(relative_error(some.value().data(), full.data() + 4 * V, V) <= kCacheTolerance);
  CHECK(relative_error(some.value().data() + V, full.data(), V) <= kCacheTolerance);
  // Roll back to 5 tokens (as after rejected draft tokens) and run token 5 again.
  cache.truncate(5);
  const int32_t tok = seq.ids[5], pos = 5;
  const int row = 0;
  auto again = m.forward({&tok, 1}, {&pos, 1}, cache, {&row, 1});
  REQUIRE(again.ok());
  CHECK(relative_error(again.value().data(), full.data() + 5 * V, V) <= kCacheTolerance);
  CHECK(cache.length() == 6);
}

TEST_CASE("forward refuses bad arguments with a message") {
  auto model = load_model(fixture_dir("glm4_moe_lite"));
  REQUIRE(model.ok());
  const Model& m = *model.value();
  KvCache cache = m.new_cache();
  const std::vector<int32_t> ids{5, 100000}, pos{0, 1};
  auto r = m.forward(ids, pos, cache, std::vector<int>{1});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("outside the vocabulary") != std::string::npos);
  CHECK(cache.length() == 0);
  auto r2 = m.forward(std::vector<int32_t>{5}, pos, cache, std::vector<int>{0});
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().message.find("positions") != std::string::npos);
  KvCache wrong(1, 3);
  auto r3 = m.forward(std::vector<int32_t>{5}, std::vector<int32_t>{0}, wrong, std::vector<int>{0});
  REQUIRE_FALSE(r3.ok());
  CHECK(r3.error().message.find("cache") != std::string::npos);
}
