#include <doctest/doctest.h>

#include <vector>

#include "block_pool.hpp"

using namespace tandem::engine::kv;

TEST_CASE("allocate until empty, release makes room again") {
  BlockPool pool(3, 16);
  auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  REQUIRE((a && b && c));
  CHECK(*a != *b);
  CHECK_FALSE(pool.allocate());
  pool.release(*b);
  CHECK(pool.num_available() == 1);
  CHECK(pool.allocate() == b);
}

TEST_CASE("reference counts: a shared block frees only when its last user leaves") {
  BlockPool pool(1, 4);
  auto a = *pool.allocate();
  pool.retain(a);
  CHECK(pool.ref_count(a) == 2);
  pool.release(a);
  CHECK(pool.num_available() == 0);
  pool.release(a);
  CHECK(pool.num_available() == 1);
  CHECK_THROWS(pool.release(a));
}

TEST_CASE("prefix cache: a released cached block is found again, and evicted least-recent first") {
  BlockPool pool(2, 2);
  std::vector<Token> t1{1, 2}, t2{3, 4};
  auto h1 = BlockPool::chain_hash(0, t1), h2 = BlockPool::chain_hash(0, t2);
  auto a = *pool.allocate(), b = *pool.allocate();
  pool.publish(a, h1, t1);
  pool.publish(b, h2, t2);
  pool.release(a);  // released first: evicted first
  pool.release(b);
  CHECK(pool.num_available() == 2);
  CHECK(pool.lookup(h2, t2) == b);  // hit, retained again
  pool.release(b);
  auto fresh = *pool.allocate();  // must evict a (least recently released), not b
  CHECK(fresh == a);
  CHECK_FALSE(pool.lookup(h1, t1));
  CHECK(pool.lookup(h2, t2) == b);
}

TEST_CASE("a hash collision never hands out the wrong content") {
  BlockPool pool(1, 2);
  std::vector<Token> t{5, 6}, other{7, 8};
  auto b = *pool.allocate();
  pool.publish(b, 42, t);
  CHECK_FALSE(pool.lookup(42, other));
  CHECK(pool.lookup(42, t) == b);
}
