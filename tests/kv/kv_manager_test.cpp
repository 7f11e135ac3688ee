#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "kv_manager.hpp"

using namespace tandem::engine::kv;

static std::vector<Token> iota_tokens(int n, int start = 100) {
  std::vector<Token> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_CASE("reserve, advance and release account blocks exactly") {
  KvManager kv(8, 4, false);
  auto prompt = iota_tokens(10);
  CHECK(kv.admit(1, prompt, true) == 0);
  CHECK(kv.blocks_needed(1, 10) == 3);
  REQUIRE(kv.reserve(1, 10));
  CHECK(kv.free_blocks() == 5);
  kv.advance(1, prompt, 10);
  CHECK(kv.written(1) == 10);
  CHECK(kv.blocks_needed(1, 2) == 0);  // 12 tokens fit in 3 blocks
  CHECK(kv.blocks_needed(1, 3) == 1);
  kv.release(1);
  CHECK(kv.free_blocks() == 8);
}

TEST_CASE("reserve refuses without changing anything when the pool is short") {
  KvManager kv(2, 4, false);
  auto prompt = iota_tokens(12);
  kv.admit(1, prompt, true);
  CHECK_FALSE(kv.reserve(1, 12));
  CHECK(kv.free_blocks() == 2);
  CHECK(kv.block_table(1).empty());
}

TEST_CASE("prefix cache: a second sequence with the same prefix shares whole blocks") {
  KvManager kv(16, 4, true);
  auto a = iota_tokens(10);
  kv.admit(1, a, true);
  REQUIRE(kv.reserve(1, 10));
  kv.advance(1, a, 10);  // two full blocks published
  auto b = a;
  b[9] = 999;  // same first 8 tokens
  CHECK(kv.admit(2, b, true) == 8);
  CHECK(kv.block_table(2)[0] == kv.block_table(1)[0]);
  CHECK(kv.block_table(2)[1] == kv.block_table(1)[1]);
  CHECK(kv.pool().ref_count(kv.block_table(1)[0]) == 2);
}

TEST_CASE("prefix cache: the last prompt token is always recomputed") {
  KvManager kv(16, 4, true);
  auto a = iota_tokens(8);
  kv.admit(1, a, true);
  REQUIRE(kv.reserve(1, 8));
  kv.advance(1, a, 8);
  kv.release(1);
  CHECK(kv.admit(2, a, true) == 4);  // 8 tokens = 2 full blocks, but only the first may be reused
}

TEST_CASE("a request can bypass the prefix cache: nothing read, nothing published") {
  KvManager kv(16, 4, true);
  auto a = iota_tokens(10);
  kv.admit(1, a, true);
  REQUIRE(kv.reserve(1, 10));
  kv.advance(1, a, 10);
  CHECK(kv.admit(2, a, false) == 0);
  REQUIRE(kv.reserve(2, 10));
  kv.advance(2, a, 10);
  CHECK(kv.pool().num_cached() == 2);  // only sequence 1's blocks
}

TEST_CASE("speculative rollback: trim returns the blocks of rejected tokens") {
  KvManager kv(16, 4, false);
  auto t = iota_tokens(6);
  kv.admit(1, t, true);
  REQUIRE(kv.reserve(1, 6));
  kv.advance(1, t, 6);
  const auto before = kv.free_blocks();
  REQUIRE(kv.reserve(1, 8));  // room for 8 draft tokens: 14 tokens -> 4 blocks
  CHECK(kv.free_blocks() == before - 2);
  auto accepted = iota_tokens(7);
  kv.advance(1, accepted, 7);  // one token accepted
  kv.trim(1);
  CHECK(kv.block_table(1).size() == 2);
  CHECK(kv.free_blocks() == before);
}

TEST_CASE("recurrent state slots sit beside the blocks and limit admission on their own") {
  KvManager kv(16, 4, false, 2);
  auto t = iota_tokens(3);
  CHECK(kv.admit(1, t, true));
  CHECK(kv.admit(2, t, true));
  CHECK(kv.state_slot(1) != kv.state_slot(2));
  CHECK_FALSE(kv.admit(3, t, true));  // blocks are free, but no state slot
  kv.release(1);
  CHECK(kv.admit(3, t, true));
}

TEST_CASE("pool sizing from a byte budget") {
  // 2 layers x 256 elements x 1 byte (fp8) = 512 bytes/token; block 16 = 8 KiB per block.
  KvGeometry g{2, 256, 1, 16};
  auto p = size_pool(g, 1 << 20, 4096);
  CHECK(p.num_blocks == 128);
  CHECK(p.tokens == 2048);
  CHECK(p.requests_at_max_len == doctest::Approx(0.5));
  CHECK(p.describe() == "KV pool: 2,048 tokens in 128 blocks of 16, 0.50 requests at max-model-len 4096");
}
