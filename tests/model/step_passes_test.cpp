// The CUDA step's split into forward passes by phase (step_passes.hpp), on the host: which
// sequences share a pass, and that each pass's logit and captured rows, put back through
// row_runs, land where one pass over the whole step would have put them.
#include <doctest/doctest.h>

#include <vector>

#include "tandem/model/step_passes.hpp"

using namespace tandem::model;

namespace {

// An item of n tokens starting at `start`, with the logits of its last token or of every token.
struct Item {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> table{0};
  PagedWork work(bool last, bool all) const { return {ids, 0, table, last, -1, all}; }
};

std::vector<std::int32_t> tokens(int n, int first) {
  std::vector<std::int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

// What a fake forward pass "computes" for the items it holds: a token's row is its id (ids are
// unique across the step), a logit row the id of the token it belongs to, both in the pass's
// order; put back into the step's order through the pass's rows and tokens.
struct Merged {
  std::vector<int> logits, captured;
};
Merged run_passes(const std::vector<PagedWork>& work, const std::vector<StepPass>& passes) {
  int R = 0, T = 0;
  for (const auto& w : work) R += logit_rows(w), T += static_cast<int>(w.tokens.size());
  Merged m{std::vector<int>(static_cast<size_t>(R), -1), std::vector<int>(static_cast<size_t>(T), -1)};
  for (const StepPass& p : passes) {
    std::vector<int> pass_logits, pass_tokens;
    for (int s : p.items) {
      const PagedWork& w = work[static_cast<size_t>(s)];
      for (auto id : w.tokens) pass_tokens.push_back(id);
      if (w.all_logits)
        for (auto id : w.tokens) pass_logits.push_back(id);
      else if (w.logits)
        pass_logits.push_back(w.tokens.back());
    }
    for (const RowRun& r : row_runs({}, p.rows))
      for (int i = 0; i < r.n; ++i) m.logits[static_cast<size_t>(r.to + i)] = pass_logits[static_cast<size_t>(r.from + i)];
    for (const RowRun& r : row_runs({}, p.tokens))
      for (int i = 0; i < r.n; ++i) m.captured[static_cast<size_t>(r.to + i)] = pass_tokens[static_cast<size_t>(r.from + i)];
  }
  return m;
}

// The same rows computed in one pass over the step, in its order.
Merged one_pass(const std::vector<PagedWork>& work) {
  Merged m;
  for (const auto& w : work) {
    for (auto id : w.tokens) m.captured.push_back(id);
    if (w.all_logits)
      for (auto id : w.tokens) m.logits.push_back(id);
    else if (w.logits)
      m.logits.push_back(w.tokens.back());
  }
  return m;
}

}  // namespace

TEST_CASE("step passes: decode-class sequences share one pass, each prompt chunk has its own") {
  // prompt (300, last logits), decode, verify block of 8 (every row), prompt (40, no logits),
  // short prompt tail (12, last logits), decode.
  const std::vector<Item> items{{tokens(300, 0)}, {tokens(1, 1000)}, {tokens(8, 2000)},
                                {tokens(40, 3000)}, {tokens(12, 4000)}, {tokens(1, 5000)}};
  const std::vector<PagedWork> work{items[0].work(true, false), items[1].work(true, false), items[2].work(false, true),
                                    items[3].work(false, false), items[4].work(true, false), items[5].work(true, false)};
  const auto passes = plan_step_passes(work, 16, false);
  REQUIRE(passes.size() == 3);
  CHECK(passes[0].invariant);
  CHECK(passes[0].items == std::vector<int>{1, 2, 4, 5});
  CHECK(!passes[1].invariant);
  CHECK(passes[1].items == std::vector<int>{0});
  CHECK(passes[2].items == std::vector<int>{3});
  // Step rows: item 0 -> 0, item 1 -> 1, item 2 -> 2..9, item 3 none, item 4 -> 10, item 5 -> 11.
  CHECK(passes[0].rows == std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(passes[1].rows == std::vector<int>{0});
  CHECK(passes[2].rows.empty());
  CHECK(passes[2].tokens.front() == 309);
  CHECK(passes[2].tokens.size() == 40);
  const Merged got = run_passes(work, passes), want = one_pass(work);
  CHECK(got.logits == want.logits);
  CHECK(got.captured == want.captured);

  SUBCASE("grouped: one prefill pass after the decode-class one") {
    const auto grouped = plan_step_passes(work, 16, true);
    REQUIRE(grouped.size() == 2);
    CHECK(grouped[1].items == std::vector<int>{0, 3});
    const Merged g = run_passes(work, grouped);
    CHECK(g.logits == want.logits);
    CHECK(g.captured == want.captured);
  }
  SUBCASE("a larger bound makes the 40-token chunk decode-class") {
    const auto wide = plan_step_passes(work, 64, false);
    REQUIRE(wide.size() == 2);
    CHECK(wide[0].items == std::vector<int>{1, 2, 3, 4, 5});
    CHECK(run_passes(work, wide).captured == want.captured);
  }
  SUBCASE("bound 0 (the decode-sized kernels off) and grouped: one pass of every item, as before") {
    const auto all = plan_step_passes(work, 0, true);
    REQUIRE(all.size() == 1);
    CHECK(!all[0].invariant);
    CHECK(all[0].items.size() == work.size());
    CHECK(all[0].rows.size() == want.logits.size());
  }
}

TEST_CASE("step passes: a step of one class is one pass in the step's order") {
  const std::vector<Item> items{{tokens(1, 0)}, {tokens(1, 10)}, {tokens(5, 20)}};
  const std::vector<PagedWork> work{items[0].work(true, false), items[1].work(true, false), items[2].work(false, true)};
  const auto passes = plan_step_passes(work, 16, false);
  REQUIRE(passes.size() == 1);
  CHECK(passes[0].invariant);
  CHECK(passes[0].rows == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
  const Item prompt{tokens(100, 0)};
  const std::vector<PagedWork> one{prompt.work(true, false)};
  const auto single = plan_step_passes(one, 16, false);
  REQUIRE(single.size() == 1);
  CHECK(!single[0].invariant);
  CHECK(single[0].rows == std::vector<int>{0});
}

TEST_CASE("row_runs: consecutive pairs in one run, through a pick of source rows") {
  const std::vector<int> to{4, 5, 6, 0, 1, 9};
  const auto runs = row_runs({}, to);
  REQUIRE(runs.size() == 3);
  CHECK((runs[0].from == 0 && runs[0].to == 4 && runs[0].n == 3));
  CHECK((runs[1].from == 3 && runs[1].to == 0 && runs[1].n == 2));
  CHECK((runs[2].from == 5 && runs[2].to == 9 && runs[2].n == 1));
  // A padded graph step's rows: items of blocks 3 and 2 padded to 4 (rows 0..2 and 4..5).
  const std::vector<int> pick{0, 1, 2, 4, 5}, dest{0, 1, 2, 3, 4};
  const auto picked = row_runs(pick, dest);
  REQUIRE(picked.size() == 2);
  CHECK((picked[0].from == 0 && picked[0].n == 3));
  CHECK((picked[1].from == 4 && picked[1].to == 3 && picked[1].n == 2));
  CHECK(row_runs({}, {}).empty());
}
