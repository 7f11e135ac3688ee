// The un-absorbed prefill's pass plan (cuda/mha_spans.hpp): every key of every sequence in exactly
// one span, spans starting at multiples of the cap, a sequence's spans in key order across passes,
// and no pass holding more rows than the cap.
#include <doctest/doctest.h>

#include <vector>

#include "cuda/mha_spans.hpp"

using namespace tandem::model::cuda;

namespace {

void check_plan(const std::vector<int>& contexts, int cap) {
  const auto passes = plan_mha_passes(contexts, cap);
  std::vector<int> next(contexts.size(), 0);  // each sequence's next key
  for (const auto& pass : passes) {
    int rows = 0;
    CHECK(!pass.empty());
    for (const MhaSpan& sp : pass) {
      REQUIRE(sp.seq >= 0);
      REQUIRE(sp.seq < static_cast<int>(contexts.size()));
      CHECK(sp.k0 == next[static_cast<std::size_t>(sp.seq)]);
      CHECK(sp.k0 % cap == 0);
      CHECK(sp.k1 > sp.k0);
      next[static_cast<std::size_t>(sp.seq)] = sp.k1;
      rows += sp.k1 - sp.k0;
    }
    CHECK(rows <= cap);
  }
  for (std::size_t s = 0; s < contexts.size(); ++s) CHECK(next[s] == contexts[s]);
}

}  // namespace

TEST_CASE("plan_mha_passes: contexts that fit share a pass, in order") {
  const std::vector<int> contexts{100, 28};
  const auto passes = plan_mha_passes(contexts, 128);
  REQUIRE(passes.size() == 1);
  REQUIRE(passes[0].size() == 2);
  CHECK((passes[0][0].seq == 0 && passes[0][0].k0 == 0 && passes[0][0].k1 == 100));
  CHECK((passes[0][1].seq == 1 && passes[0][1].k0 == 0 && passes[0][1].k1 == 28));
}

TEST_CASE("plan_mha_passes: a long context is cut at multiples of the cap, one span a pass") {
  const std::vector<int> contexts{100, 300};
  const auto passes = plan_mha_passes(contexts, 128);
  REQUIRE(passes.size() == 4);  // [s0 0..100) | [s1 0..128) | [s1 128..256) | [s1 256..300)
  CHECK(passes[1][0].k1 == 128);
  CHECK((passes[3][0].k0 == 256 && passes[3][0].k1 == 300));
  check_plan(contexts, 128);
}

TEST_CASE("plan_mha_passes: every key once, in order, within the cap") {
  for (int cap : {64, 128, 192, 4096})
    for (const std::vector<int>& contexts : {std::vector<int>{1}, std::vector<int>{64, 64, 64}, std::vector<int>{0, 65, 0, 900},
                                             std::vector<int>{4096, 1, 4095, 8192}, std::vector<int>{}})
      check_plan(contexts, cap);
  CHECK(plan_mha_passes(std::vector<int>{0, 0}, 64).empty());
}
