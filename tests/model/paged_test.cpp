// The forward pass through the paged KV pool (PagedKvPool + KvManager block tables) against
// transformers' golden logits and greedy runs, with block sizes that do and do not divide the
// sequence lengths; prefix-cache reuse of another sequence's blocks; and speculative-style
// rollback (reserve extra, write, accept fewer, trim, continue).
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "kv_manager.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/paged_kv.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;
namespace kv = tandem::engine::kv;

namespace {

constexpr double kGoldenTolerance = 1e-4;
constexpr double kCacheTolerance = 1e-5;

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

std::vector<int32_t> positions(int from, int n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), from);
  return p;
}

std::vector<int> rows(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

// A model, its paged pool and the KV manager that hands out the pool's blocks.
struct Paged {
  std::unique_ptr<Model> model;
  std::unique_ptr<PagedKvPool> pool;
  kv::KvManager mgr;
  Paged(const std::string& fixture, int num_blocks, int block_size)
      : model(load(fixture)), pool(make_pool(*model, num_blocks, block_size)), mgr(num_blocks, block_size, true) {}

  static std::unique_ptr<Model> load(const std::string& fixture) {
    auto m = load_model(fixture_dir(fixture));
    REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
    return std::move(m).value();
  }
  static std::unique_ptr<PagedKvPool> make_pool(const Model& m, int num_blocks, int block_size) {
    auto p = PagedKvPool::create(m.kv_layout(), num_blocks, block_size);
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
    return std::move(p).value();
  }

  // Runs tokens[from, from + n) of sequence `id` (its full token list is `tokens`), as the engine
  // does: reserve, forward through the block table, advance. Returns the logits of all n rows.
  std::vector<float> run(kv::SeqId id, const std::vector<int32_t>& tokens, int from, int n) {
    REQUIRE(mgr.written(id) == from);
    REQUIRE(mgr.reserve(id, n));
    PagedKvSequence seq(*pool, mgr.block_table(id), from);
    std::vector<int32_t> ids(tokens.begin() + from, tokens.begin() + from + n);
    auto l = model->forward(ids, positions(from, n), seq, rows(n));
    REQUIRE_MESSAGE(l.ok(), (l.ok() ? "" : l.error().message));
    mgr.advance(id, tokens, from + n);
    return std::move(l).value();
  }
};

int argmax(const float* l, int V) { return static_cast<int>(std::max_element(l, l + V) - l); }

void check_fixture_paged(const std::string& fixture, int block_size, int prefill_chunk) {
  CAPTURE(fixture);
  CAPTURE(block_size);
  CAPTURE(prefill_chunk);
  Paged p(fixture, 64, block_size);
  const int V = p.model->vocab_size();
  kv::SeqId id = 0;
  for (const auto& g : golden(fixture)) {
    ++id;
    std::vector<int32_t> tokens = g.ids;
    const int n = static_cast<int>(tokens.size());
    REQUIRE(p.mgr.admit(id, tokens, false) == 0);
    std::vector<float> logits;
    for (int at = 0; at < n;) {
      const int c = std::min(prefill_chunk, n - at);
      auto l = p.run(id, tokens, at, c);
      logits.insert(logits.end(), l.begin(), l.end());
      at += c;
    }
    for (int t = 0; t < n; ++t) {
      const size_t off = static_cast<size_t>(t) * static_cast<size_t>(V);
      const double err = relative_error(logits.data() + off, g.logits.data() + off, V);
      CHECK_MESSAGE(err <= kGoldenTolerance, "position " << t << ": relative error " << err);
    }
    // Greedy decode one token at a time through the pool; crosses block boundaries.
    std::vector<int32_t> out{argmax(logits.data() + static_cast<size_t>(n - 1) * static_cast<size_t>(V), V)};
    tokens.push_back(out.back());
    while (out.size() < g.greedy.size()) {
      auto l = p.run(id, tokens, static_cast<int>(tokens.size()) - 1, 1);
      out.push_back(argmax(l.data(), V));
      tokens.push_back(out.back());
    }
    CHECK(out == g.greedy);
    p.mgr.release(id);
  }
  CHECK(p.mgr.free_blocks() == 64);
}

}  // namespace

TEST_CASE("paged KV: every fixture matches transformers with block sizes 4 and 16, whole or chunked prefill") {
  for (const char* fixture : {"glm4_moe_lite", "glm4_moe_lite_variant", "glm4_moe"})
    for (int bs : {4, 16})
      for (int chunk : {1000, 3}) check_fixture_paged(fixture, bs, chunk);
}

TEST_CASE("paged KV: a second sequence reusing the first one's prefix blocks gets the logits of a fresh run") {
  for (const char* fixture : {"glm4_moe_lite", "glm4_moe"}) {
    CAPTURE(fixture);
    const int bs = 4;
    Paged p(fixture, 32, bs);
    const int V = p.model->vocab_size();
    const auto g = golden(fixture);
    // A: the longest golden prompt. B: A's first 9 tokens, then tokens of another prompt.
    const auto& longest = *std::max_element(g.begin(), g.end(), [](auto& a, auto& b) { return a.ids.size() < b.ids.size(); });
    std::vector<int32_t> a = longest.ids;
    std::vector<int32_t> b(a.begin(), a.begin() + 9);
    for (int32_t t : g[0].ids) b.push_back(t);

    REQUIRE(p.mgr.admit(1, a, true) == 0);
    p.run(1, a, 0, static_cast<int>(a.size()));
    const auto cached = p.mgr.admit(2, b, true);
    REQUIRE(cached == 8);  // two whole blocks of 4 shared
    CHECK(p.mgr.block_table(2)[0] == p.mgr.block_table(1)[0]);
    CHECK(p.mgr.block_table(2)[1] == p.mgr.block_table(1)[1]);
    const auto reused = p.run(2, b, 8, static_cast<int>(b.size()) - 8);

    // The same prompt from scratch, in a contiguous cache.
    KvCache fresh = p.model->new_cache();
    auto full = p.model->forward(b, positions(0, static_cast<int>(b.size())), fresh, rows(static_cast<int>(b.size())));
    REQUIRE(full.ok());
    for (int t = 8; t < static_cast<int>(b.size()); ++t)
      CHECK(relative_error(reused.data() + static_cast<size_t>(t - 8) * static_cast<size_t>(V),
                           full.value().data() + static_cast<size_t>(t) * static_cast<size_t>(V), V) <= kCacheTolerance);
    // And against a paged run from scratch with the prefix cache bypassed (private blocks).
    REQUIRE(p.mgr.admit(3, b, false) == 0);
    const auto scratch = p.run(3, b, 0, static_cast<int>(b.size()));
    CHECK(p.mgr.block_table(3)[0] != p.mgr.block_table(1)[0]);
    for (int t = 8; t < static_cast<int>(b.size()); ++t)
      CHECK(relative_error(reused.data() + static_cast<size_t>(t - 8) * static_cast<size_t>(V),
                           scratch.data() + static_cast<size_t>(t) * static_cast<size_t>(V), V) <= kCacheTolerance);
  }
}

TEST_CASE("paged KV: after rolling back rejected draft tokens, continuing matches never having computed them") {
  for (const char* fixture : {"glm4_moe_lite", "glm4_moe"}) {
    CAPTURE(fixture);
    const int bs = 4;
    Paged p(fixture, 32, bs);
    const int V = p.model->vocab_size();
    const auto g = golden(fixture)[1];
    const int n = static_cast<int>(g.ids.size());
    std::vector<int32_t> tokens = g.ids;
    REQUIRE(p.mgr.admit(1, tokens, false) == 0);
    p.run(1, tokens, 0, n);
    const int free_before = p.mgr.free_blocks();

    // Draft 6 tokens (the verifier computes them all), accept 2, trim the rest.
    std::vector<int32_t> drafted = tokens;
    for (int32_t t : {7, 8, 9, 10, 11, 12}) drafted.push_back(t);
    REQUIRE(p.mgr.reserve(1, 6));
    {
      PagedKvSequence seq(*p.pool, p.mgr.block_table(1), n);
      std::vector<int32_t> ids(drafted.begin() + n, drafted.end());
      REQUIRE(p.model->forward(ids, positions(n, 6), seq, rows(6)).ok());
    }
    std::vector<int32_t> accepted(drafted.begin(), drafted.begin() + n + 2);
    p.mgr.advance(1, accepted, n + 2);
    p.mgr.trim(1);
    CHECK(p.mgr.free_blocks() == free_before - ((n + 2 + bs - 1) / bs - (n + bs - 1) / bs));

    // Continue with a token other than the rejected draft at that position.
    accepted.push_back(42);
    accepted.push_back(43);
    const auto cont = p.run(1, accepted, n + 2, 2);

    KvCache fresh = p.model->new_cache();
    const int m = static_cast<int>(accepted.size());
    auto full = p.model->forward(accepted, positions(0, m), fresh, rows(m));
    REQUIRE(full.ok());
    for (int t = 0; t < 2; ++t)
      CHECK(relative_error(cont.data() + static_cast<size_t>(t) * static_cast<size_t>(V),
                           full.value().data() + static_cast<size_t>(n + 2 + t) * static_cast<size_t>(V), V) <= kCacheTolerance);
  }
}

TEST_CASE("paged KV refuses positions out of order, a short block table and a pool of the wrong model") {
  Paged p("glm4_moe", 8, 4);
  REQUIRE(p.mgr.admit(1, std::vector<int32_t>{1, 2, 3, 4, 5}, false) == 0);
  REQUIRE(p.mgr.reserve(1, 4));
  const std::vector<int32_t> ids{1, 2, 3, 4, 5};
  {
    PagedKvSequence seq(*p.pool, p.mgr.block_table(1), 0);
    auto r = p.model->forward(ids, positions(0, 5), seq, rows(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("block table") != std::string::npos);
    CHECK(seq.length() == 0);
  }
  {
    PagedKvSequence seq(*p.pool, p.mgr.block_table(1), 0);
    auto r = p.model->forward(std::vector<int32_t>{1, 2}, std::vector<int32_t>{0, 2}, seq, rows(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("position") != std::string::npos);
  }
  {
    auto other = PagedKvPool::create(KvLayout{1, 3}, 8, 4);
    REQUIRE(other.ok());
    PagedKvSequence seq(*other.value(), p.mgr.block_table(1), 0);
    auto r = p.model->forward(std::vector<int32_t>{1}, std::vector<int32_t>{0}, seq, rows(1));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("cache") != std::string::npos);
  }
  CHECK_FALSE(PagedKvPool::create(p.model->kv_layout(), 0, 16).ok());
}
