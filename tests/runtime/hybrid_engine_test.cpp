// glm5_next in the engine: the linear-attention state lives in a per-request slot outside the
// paged pool. Greedy output equals transformers' whether requests run one at a time or batched
// together with chunked prefill (max-num-batched-tokens small, so prompts arrive in pieces), and
// the start-up log reports both pools and the single-page-layout comparison.
#include <doctest/doctest.h>

#include <cstdio>

#include "engine_harness.hpp"
#include "hybrid_pool.hpp"

using namespace tandem::engine::runtime;
using namespace tandem::engine::runtime::test;

TEST_CASE("glm5_next_text in the engine: greedy equals transformers, batched and with chunked prefill") {
  for (int batched_tokens : {512, 5}) {
    CAPTURE(batched_tokens);
    EngineConfig cfg;
    cfg.max_model_len = 128;
    cfg.max_num_seqs = 4;
    cfg.block_size = 4;
    cfg.max_num_batched_tokens = batched_tokens;
    cfg.kv_cache_memory = 4ull << 20;
    auto t = start_engine("glm5_next_text", cfg);
    bool state_line = false, lcm_line = false, prefix_off = false;
    for (const auto& l : t.log) {
      state_line |= l.rfind("recurrent state pool: 4 slots", 0) == 0;
      lcm_line |= l.find("one page layout for all 4 layers") != std::string::npos;
      prefix_off |= l.find("prefix caching is off") != std::string::npos;
    }
    CHECK(state_line);
    CHECK(lcm_line);
    CHECK(prefix_off);
    Collector c;
    const auto g = golden("glm5_next_text");
    std::vector<RequestId> ids;
    for (const auto& s : g) {  // all at once: they share steps
      auto id = t.engine->submit(greedy(s.prompt, static_cast<int>(s.greedy.size()), c.sink()));
      REQUIRE(id.ok());
      ids.push_back(id.value());
    }
    c.wait(ids.size());
    const auto out = c.outputs();
    for (size_t i = 0; i < g.size(); ++i) {
      CHECK(out.at(ids[i]).error == "");
      CHECK(out.at(ids[i]).tokens == g[i].greedy);
    }
  }
}

TEST_CASE("separate pools against one LCM page layout, for the same bytes") {
  // The fixture's geometry and the default glm5_next_text one (45 layers, every 4th sparse
  // attention: 11 attention + 34 linear; rows of 512 latent + 2 x 128 indexer elements in bf16;
  // per linear layer 3 x 3 x 8192 conv history + 64 heads x 128 x 128 state in fp32).
  struct Row {
    const char* name;
    HybridPoolInputs in;
  };
  HybridPoolInputs tiny;
  tiny.layout = {2, 64, 2 * (3 * 3 * 32 + 2 * 16 * 16)};
  tiny.recurrent_layers = 2;
  tiny.block_size = 16;
  tiny.max_num_seqs = 4;
  tiny.budget_bytes = 4ull << 20;
  HybridPoolInputs full;
  full.layout = {11, 512 + 2 * 128, 34L * (3 * 3 * 8192 + 64 * 128 * 128)};
  full.recurrent_layers = 34;
  full.block_size = 16;
  full.max_num_seqs = 64;
  full.budget_bytes = 60ull << 30;
  std::printf("%-28s %14s %14s %12s %10s\n", "geometry", "separate", "one layout", "block size", "ratio");
  for (const Row& r : {Row{"glm5_next_text fixture", tiny}, Row{"glm5_next_text defaults", full}}) {
    const HybridPoolReport rep = hybrid_pool_report(r.in);
    std::printf("%-28s %14lld %14lld %12d %9.2fx\n", r.name, static_cast<long long>(rep.tokens),
                static_cast<long long>(rep.lcm_tokens), rep.lcm_block_size,
                static_cast<double>(rep.tokens) / static_cast<double>(rep.lcm_tokens));
    for (const auto& l : rep.lines) MESSAGE(l);
    CHECK(rep.tokens > rep.lcm_tokens);
    CHECK(rep.lcm_block_size % r.in.block_size == 0);
    // The single layout's page holds one linear layer's state.
    const long per_layer_state = r.in.layout.state_floats / r.in.recurrent_layers * 4;
    CHECK(static_cast<long>(rep.lcm_block_size) * r.in.layout.row_width * 2 >= per_layer_state);
  }
  // By hand, the defaults: a linear layer's state is (73,728 + 1,048,576) x 4 = 4,489,216 bytes;
  // a token's row 768 x 2 = 1,536 bytes, so the block grows to 2,928 tokens (183 x 16), and all
  // 45 layers pay for every block: 60 GiB / (45 x 2928 x 1536) = 318 blocks = 931,104 tokens.
  const HybridPoolReport rep = hybrid_pool_report(full);
  CHECK(rep.lcm_block_size == 2928);
  CHECK(rep.lcm_tokens == 931104);
  // Separate pools: 64 slots of 34 x 4,489,216 bytes (~9.1 GiB), then 11 x 1,536 bytes per token.
  CHECK(rep.state_pool_bytes == 64ull * 34 * 4489216);
  CHECK(rep.tokens == static_cast<long long>(((60ull << 30) - rep.state_pool_bytes) / (16ull * 11 * 1536) * 16));
}
