// Prefix caching of a recurrent model (kv/state_snapshots.hpp, KvManager with state copies): a hit
// reaches only a block boundary where a copy of the state was kept, copies that a step reads or
// writes are never replaced under it, and the least recently used one goes first.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "kv_manager.hpp"
#include "state_snapshots.hpp"

using namespace tandem::engine::kv;

namespace {

std::vector<Token> tokens(int n, int start = 100) {
  std::vector<Token> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::uint64_t chain(std::span<const Token> t, int block) {
  std::uint64_t h = 0;
  for (size_t i = 0; i + static_cast<size_t>(block) <= t.size(); i += static_cast<size_t>(block))
    h = BlockPool::chain_hash(h, t.subspan(i, static_cast<size_t>(block)));
  return h;
}

// Runs a sequence's prompt through the way the scheduler does: the chunk up to its boundary, the
// copy kept there, then the rest.
void prefill(KvManager& kv, SeqId id, const std::vector<Token>& p) {
  const int start = kv.written(id);
  (void)kv.take_state_load(id);
  if (const int at = kv.state_boundary(id); at > start) {
    REQUIRE(kv.begin_state_save(id));
    REQUIRE(kv.reserve(id, at - start));
    kv.advance(id, p, at);
  }
  REQUIRE(kv.reserve(id, static_cast<int>(p.size()) - kv.written(id)));
  kv.advance(id, p, static_cast<int>(p.size()));
}

}  // namespace

TEST_CASE("state copies: found by prefix, pinned while in use, least recently used replaced") {
  StateSnapshots s(2);
  const auto a = tokens(8), b = tokens(8, 500);
  const auto ia = s.reserve();
  REQUIRE(ia);
  CHECK_FALSE(s.acquire(chain(a, 4), a));  // not findable until written
  s.commit(*ia, chain(a, 4), a);
  const auto ib = s.reserve();
  REQUIRE(ib);
  CHECK(*ib != *ia);
  s.commit(*ib, chain(b, 4), b);
  CHECK(s.num_kept() == 2);
  // Same hash, other tokens: never handed out.
  CHECK_FALSE(s.acquire(chain(a, 4), b));
  // a is used again, so b is the least recently used.
  const auto hit = s.acquire(chain(a, 4), a);
  REQUIRE(hit);
  CHECK(*hit == *ia);
  // While a is pinned, a new copy can only replace b; a second one finds nothing free.
  const auto ic = s.reserve();
  REQUIRE(ic);
  CHECK(*ic == *ib);
  CHECK_FALSE(s.contains(chain(b, 4), b));
  CHECK_FALSE(s.reserve());
  s.abandon(*ic);
  s.unpin(*hit);
  CHECK(s.contains(chain(a, 4), a));
  // The abandoned copy holds nothing: it is the one reused next.
  const auto id = s.reserve();
  REQUIRE(id);
  CHECK(*id == *ic);
}

TEST_CASE("a recurrent model's prefix hit stops at the longest boundary with a kept state") {
  KvManager kv(64, 4, true, 0, 2);
  const auto p = tokens(18);  // last boundary: 16
  CHECK(kv.admit(1, p, true) == 0);
  CHECK(kv.state_boundary(1) == 16);
  prefill(kv, 1, p);
  kv.release(1);
  CHECK(kv.state_snapshots().num_kept() == 1);

  // The same prompt: every usable block hit, and the state at 16 kept: resumes there.
  CHECK(kv.admit(2, p, true) == 16);
  CHECK(kv.state_boundary(2) == 0);  // its boundary is kept already
  const auto load = kv.take_state_load(2);
  REQUIRE(load);
  CHECK_FALSE(kv.take_state_load(2));  // handed out once
  kv.release(2);

  // A longer prompt finds the 4 full blocks of the first one's 18 tokens: the hit is 16, and it
  // keeps a copy of its own at its last boundary (24).
  auto longer = p;
  for (int i = 0; i < 9; ++i) longer.push_back(900 + i);
  CHECK(kv.admit(3, longer, true) == 16);
  CHECK(kv.state_boundary(3) == 24);
  prefill(kv, 3, longer);
  kv.release(3);
  CHECK(kv.state_snapshots().num_kept() == 2);

  // Blocks without a kept state give nothing: a prompt that shares 5 blocks (20 tokens) with
  // `longer`, but no kept state past 16, resumes at 16; its fifth hit block goes back.
  auto other = longer;
  other[22] = 7;
  const auto free_before = kv.free_blocks();
  CHECK(kv.admit(4, other, true) == 16);
  CHECK(kv.block_table(4).size() == 4u);
  CHECK(kv.free_blocks() == free_before - 4);  // the 4 blocks it shares are in use, the fifth is not
  kv.release(4);

  // A request that bypasses the cache neither resumes nor keeps a copy.
  CHECK(kv.admit(5, p, false) == 0);
  CHECK(kv.state_boundary(5) == 0);
  CHECK_FALSE(kv.take_state_load(5));
  kv.release(5);
}

TEST_CASE("a kept state is not replaced while a sequence is about to read it, nor found while written") {
  KvManager kv(64, 4, true, 0, 1);
  const auto p = tokens(10);  // boundary 8
  kv.admit(1, p, true);
  prefill(kv, 1, p);
  kv.release(1);
  // Sequence 2 resumes from the only copy; sequence 3 (another prompt) cannot take it meanwhile.
  CHECK(kv.admit(2, p, true) == 8);
  const auto q = tokens(10, 700);
  CHECK(kv.admit(3, q, true) == 0);
  CHECK(kv.state_boundary(3) == 8);
  CHECK_FALSE(kv.begin_state_save(3));  // every copy in use: no copy for it
  kv.release(3);
  REQUIRE(kv.take_state_load(2));
  REQUIRE(kv.reserve(2, 2));
  kv.advance(2, p, 10);  // the step that read it completed: free to go
  kv.release(2);
  CHECK(kv.admit(4, q, true) == 0);
  REQUIRE(kv.begin_state_save(4));
  // Written but not yet complete: a lookup of q's prefix finds nothing.
  CHECK(kv.admit(5, q, true) == 0);
  kv.release(5);
  kv.release(4);  // the step failed: the copy is abandoned, not kept
  CHECK(kv.state_snapshots().num_kept() == 0);
}

TEST_CASE("a model without a recurrent state keeps no copies, and hits reach every cached block") {
  KvManager kv(64, 4, true);
  const auto p = tokens(18);
  kv.admit(1, p, true);
  CHECK(kv.state_boundary(1) == 0);
  REQUIRE(kv.reserve(1, 18));
  kv.advance(1, p, 18);
  kv.release(1);
  CHECK(kv.admit(2, p, true) == 16);
  CHECK_FALSE(kv.take_state_load(2));
}
