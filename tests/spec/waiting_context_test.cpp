// The CUDA drafter's waiting context rows (spec/waiting_context.hpp): what one pass writes.
#include <doctest/doctest.h>

#include <vector>

#include "tandem/spec/waiting_context.hpp"

using tandem::spec::WaitingContext;

TEST_CASE("waiting context rows: one pass writes each slot's latest row; the rest go to the scratch block") {
  WaitingContext w(8);
  CHECK(w.empty());
  // Step 1 verified a block at positions 10..13 (slots 40..43), of which 12 and 13 were rejected;
  // step 2 decoded position 12 again (slot 42) and step 3 position 13 (slot 43).
  w.add(std::vector<std::int32_t>{10, 11, 12, 13}, std::vector<std::int32_t>{40, 41, 42, 43});
  w.add(std::vector<std::int32_t>{12}, std::vector<std::int32_t>{42});
  w.add(std::vector<std::int32_t>{13}, std::vector<std::int32_t>{43});
  CHECK(w.size() == 6);
  CHECK(w.fits(2));
  CHECK_FALSE(w.fits(3));
  std::vector<std::int32_t> pos(8, -1), slots(8, -1);
  const std::int32_t scratch = 100;
  w.stage(8, scratch, 4, pos, slots);
  // The rejected drafts' rows are sent to the scratch block, the rows that replaced them kept.
  CHECK(pos == std::vector<std::int32_t>{10, 11, 0, 0, 12, 13, 0, 0});
  CHECK(slots == std::vector<std::int32_t>{40, 41, scratch + 2, scratch + 3, 42, 43, scratch + 2, scratch + 3});
  w.clear();
  CHECK(w.empty());
  CHECK(w.fits(8));
}

TEST_CASE("waiting context rows: without padding or repeats the pass is the rows as handed over") {
  WaitingContext w(4);
  w.add(std::vector<std::int32_t>{0, 1, 2}, std::vector<std::int32_t>{7, 8, 9});
  std::vector<std::int32_t> pos(3), slots(3);
  w.stage(3, 50, 16, pos, slots);
  CHECK(pos == std::vector<std::int32_t>{0, 1, 2});
  CHECK(slots == std::vector<std::int32_t>{7, 8, 9});
}
