// glm5_next in the engine: the linear-attention state lives in a per-request slot outside the
// paged pool. Greedy output equals transformers' whether requests run one at a time or batched
// together with chunked prefill (max-num-batched-tokens small, so prompts arrive in pieces), and
// the start-up log reports both pools and the single-page-layout comparison. Prefix caching keeps
// copies of the state at prompts' last block boundaries, and a hit resumes from one, on the CPU
// path and on a (host-backed) device model alike.
#include <doctest/doctest.h>

#include <cstdio>

#include "engine_harness.hpp"
#include "host_device_model.hpp"
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
    bool state_line = false, lcm_line = false, copies_line = false;
    for (const auto& l : t.log) {
      state_line |= l.rfind("recurrent state pool: 4 slots", 0) == 0;
      lcm_line |= l.find("one page layout for all 4 layers") != std::string::npos;
      copies_line |= l.rfind("prefix caching of the recurrent state: 4 copies", 0) == 0;
    }
    CHECK(state_line);
    CHECK(lcm_line);
    CHECK(copies_line);
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

// A conversation with a recurrent model: a prompt, the same prompt again, one that extends it, the
// next turn (the previous prompt, its answer and more), that turn again, the first prompt after its
// copy was replaced. Each request runs alone, so the hits are exact: a hit reaches the longest
// block boundary with a kept state, never further, and every answer is the solo greedy one.
TEST_CASE("prefix caching of a recurrent model: a hit resumes from the state kept at its boundary") {
  const std::string fixture = "glm5_next_text";
  auto reference = load(fixture);
  std::vector<std::int32_t> base;
  for (int i = 0; i < 18; ++i) base.push_back((7 * i + 5) % 200 + 3);
  auto solo = [&](const std::vector<std::int32_t>& p) {
    auto o = tandem::model::greedy_generate(*reference, p, 8);
    REQUIRE(o.ok());
    return o.value();
  };
  std::vector<std::int32_t> extended = base;
  for (int i = 0; i < 5; ++i) extended.push_back(150 + i);
  std::vector<std::int32_t> next_turn = extended;
  const auto answer = solo(extended);
  next_turn.insert(next_turn.end(), answer.begin(), answer.end());
  next_turn.push_back(61), next_turn.push_back(62);
  // Block size 4: a prompt of n tokens keeps its state at (n - 1) / 4 * 4 (its last token is
  // always computed). base 18 -> 16, extended 23 -> 20, next_turn 33 -> 32; next_turn finds the
  // 7 blocks extended's answer filled, but a kept state only at 20.
  const std::vector<std::vector<std::int32_t>> prompts = {base, base, extended, next_turn, next_turn, base};
  const std::vector<std::int64_t> hits_after = {0, 16, 32, 52, 84, 84};  // base's copy is the one replaced
  for (const bool on_device : {false, true}) {
    CAPTURE(on_device);
    EngineConfig cfg;
    cfg.max_model_len = 128;
    cfg.max_num_seqs = 2;  // so 2 copies: the next turn's replaces base's (least recently used)
    cfg.block_size = 4;
    cfg.kv_cache_memory = 4ull << 20;
    std::vector<std::string> log;
    cfg.log = [&log](const std::string& l) { log.push_back(l); };
    std::unique_ptr<tandem::model::Model> model = load(fixture);
    HostDeviceModel* device = nullptr;
    if (on_device) {
      auto d = std::make_unique<HostDeviceModel>(std::move(model), cfg.max_num_seqs);
      device = d.get();
      model = std::move(d);
    }
    auto engine = Engine::start(std::move(model), cfg);
    REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.error().message));
    CHECK(std::any_of(log.begin(), log.end(), [](const std::string& l) {
      return l.rfind("prefix caching of the recurrent state: 2 copies", 0) == 0;
    }));
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      Collector c;
      auto id = engine.value()->submit(greedy(prompts[i], 8, c.sink()));
      REQUIRE(id.ok());
      c.wait(1);
      CHECK(c.outputs().at(id.value()).error == "");
      CHECK(c.outputs().at(id.value()).tokens == solo(prompts[i]));
      CHECK(engine.value()->metrics().prefix_cache_hit_tokens == hits_after[i]);
    }
    if (device) {
      CHECK(device->state_loads == 4);  // base again, extended, next_turn twice
      CHECK(device->state_saves == 4);  // base, extended, next_turn, base after its copy went
    }
  }
}

TEST_CASE("prefix caching of a recurrent model can be turned off, and is off without room for a copy") {
  const std::string fixture = "glm5_next_text";
  for (const int copies : {0, -1}) {
    CAPTURE(copies);
    EngineConfig cfg;
    cfg.max_model_len = 64;
    cfg.max_num_seqs = 2;
    cfg.block_size = 4;
    auto m = load(fixture);
    const std::uint64_t state_bytes = static_cast<std::uint64_t>(m->kv_layout().state_floats) * 4u;
    // -1 (the default) keeps copies within an eighth of what the states leave: here a pool of 16
    // blocks, whose eighth is less than one copy.
    const std::uint64_t blocks = bytes_for_blocks(*m, 16, 4);
    REQUIRE(blocks / 8 < state_bytes);
    cfg.kv_cache_memory = copies == 0 ? 4ull << 20 : 2 * state_bytes + blocks;
    cfg.prefix_state_copies = copies;
    std::vector<std::string> log;
    cfg.log = [&log](const std::string& l) { log.push_back(l); };
    auto engine = Engine::start(std::move(m), cfg);
    REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.error().message));
    CHECK(std::any_of(log.begin(), log.end(), [](const std::string& l) { return l.rfind("prefix caching is off: ", 0) == 0; }));
    std::vector<std::int32_t> p;
    for (int i = 0; i < 13; ++i) p.push_back(i * 3 + 4);
    for (int round = 0; round < 2; ++round) {
      Collector c;
      auto id = engine.value()->submit(greedy(p, 4, c.sink()));
      REQUIRE(id.ok());
      c.wait(1);
      CHECK(c.outputs().at(id.value()).error == "");
    }
    CHECK(engine.value()->metrics().prefix_cache_hit_tokens == 0);
  }
  EngineConfig bad;
  bad.prefix_state_copies = -2;
  bad.max_model_len = 64;
  bad.kv_cache_memory = 4ull << 20;
  auto refused = Engine::start(load(fixture), bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("`prefix_state_copies` -2") != std::string::npos);
}
