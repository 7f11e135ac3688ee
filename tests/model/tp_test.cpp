// Tensor parallelism on the CPU path: each golden fixture split over 2 ranks, and the MLA ones over
// 3 (real TCP on loopback, one thread per rank; 3 makes every split uneven), gives transformers' logits within the
// golden tolerance and TP1's within float round-off, and the same greedy tokens. The glm5_next
// fixtures (2 linear-attention heads) split over 2: KDA heads and their state, MLA heads, the
// replicated indexer, experts and vocabulary.
#include <doctest/doctest.h>

#include "../comm/tp_group.hpp"
#include "tandem/model/model.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;

namespace {

struct RankRun {
  std::string error;
  std::vector<float> logits;
  std::vector<int32_t> greedy;
};

RankRun run_rank(tandem::comm::Communicator& c, const std::string& fixture, const std::vector<int32_t>& ids, int new_tokens) {
  RankRun out;
  auto m = load_model(fixture_dir(fixture), c);
  if (!m) return {m.error().message, {}, {}};
  KvCache cache = m.value()->new_cache();
  std::vector<int32_t> pos(ids.size());
  std::vector<int> rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) pos[i] = static_cast<int32_t>(i), rows[i] = static_cast<int>(i);
  auto logits = m.value()->forward(ids, pos, cache, rows);
  if (!logits) return {logits.error().message, {}, {}};
  out.logits = logits.value();
  auto g = greedy_generate(*m.value(), ids, new_tokens);
  if (!g) return {g.error().message, {}, {}};
  out.greedy = g.value();
  return out;
}

}  // namespace

TEST_CASE("TP2 and TP3 equal TP1 and transformers on the golden fixtures") {
  for (const std::string fixture :
       {"glm4_moe", "glm4_moe_lite", "glm4_moe_lite_variant", "glm5_next_text", "glm5_next_text_sparse"}) {
    const auto doc = read_json(fixture_dir(fixture) / "golden.json");
    const auto ids = doc["sequences"][0]["input_ids"].get<std::vector<int32_t>>();
    const auto expect_greedy = doc["sequences"][0]["greedy"].get<std::vector<int32_t>>();
    const auto golden = read_all(fixture_dir(fixture) / "golden.safetensors").at("seq0.logits").second;

    tandem::comm::SingleRank one;
    const RankRun tp1 = run_rank(one, fixture, ids, static_cast<int>(expect_greedy.size()));
    REQUIRE_MESSAGE(tp1.error.empty(), tp1.error);
    const int V = static_cast<int>(tp1.logits.size() / ids.size());

    // glm4_moe has 2 key/value heads, glm5_next 2 linear-attention heads: at most 2 ranks (the
    // next cases show the refusals).
    const bool two = fixture == "glm4_moe" || fixture.starts_with("glm5_next");
    const std::vector<int> sizes = two ? std::vector<int>{2} : std::vector<int>{2, 3};
    for (int size : sizes) {
      auto ranks = tandem::comm::test::run_group<RankRun>(
          size, [&](tandem::comm::Communicator& c) { return run_rank(c, fixture, ids, static_cast<int>(expect_greedy.size())); },
          [](const std::string& e) { return RankRun{e, {}, {}}; });
      for (int r = 0; r < size; ++r) {
        const RankRun& run = ranks[static_cast<size_t>(r)];
        INFO(fixture << " TP" << size << " rank " << r);
        REQUIRE_MESSAGE(run.error.empty(), run.error);
        REQUIRE(run.logits.size() == tp1.logits.size());
        for (size_t t = 0; t < ids.size(); ++t) {
          const float* ours = run.logits.data() + t * static_cast<size_t>(V);
          CHECK(relative_error(ours, tp1.logits.data() + t * static_cast<size_t>(V), V) <= 1e-5);
          CHECK(relative_error(ours, golden.data() + t * static_cast<size_t>(V), V) <= 1e-4);
        }
        CHECK(run.greedy == tp1.greedy);
        CHECK(run.greedy == expect_greedy);
        if (r > 0) CHECK(run.logits == ranks[0].logits);  // the ranks agree bit for bit
      }
    }
  }
}

TEST_CASE("a GQA model with fewer key/value heads than ranks is refused with the reason") {
  // The glm4_moe fixture has 2 key/value heads.
  auto out = tandem::comm::test::run_group<std::string>(
      3,
      [](tandem::comm::Communicator& c) {
        auto m = load_model(fixture_dir("glm4_moe"), c);
        return m ? std::string("loaded") : m.error().message;
      },
      [](const std::string& e) { return e; });
  for (const auto& e : out) CHECK(e.find("num_key_value_heads 2 is less than the tensor-parallel size 3") != std::string::npos);
}

TEST_CASE("glm5_next with fewer linear-attention heads than ranks is refused with the reason") {
  // The glm5_next_text fixture has 2 linear-attention heads.
  auto out = tandem::comm::test::run_group<std::string>(
      3,
      [](tandem::comm::Communicator& c) {
        auto m = load_model(fixture_dir("glm5_next_text"), c);
        return m ? std::string("loaded") : m.error().message;
      },
      [](const std::string& e) { return e; });
  // shard.hpp's split of 2 heads over 3 ranks leaves rank 0 none; every rank refuses, not only
  // that one (the others would otherwise load and then fail on a lost peer, without the reason).
  REQUIRE(out.size() == 3);
  for (const auto& e : out)
    CHECK(e.find("3 tensor-parallel ranks over 2 linear-attention heads leave a rank none; use at most 2 ranks") !=
          std::string::npos);
}
