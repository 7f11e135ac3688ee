// The engine on one request at a time: golden greedy output, stop tokens, seeded sampling,
// cancellation, refused requests and the start-up line.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine_harness.hpp"

using namespace tandem::engine::runtime;
using namespace tandem::engine::runtime::test;

namespace {

EngineConfig small_config() {
  EngineConfig c;
  c.max_model_len = 64;
  c.max_num_seqs = 4;
  c.block_size = 16;
  c.kv_cache_memory = std::uint64_t{1} << 20;
  return c;
}

}  // namespace

TEST_CASE("the engine's greedy output for every fixture prompt is transformers' continuation") {
  for (const char* fixture : {"glm4_moe_lite", "glm4_moe_lite_variant", "glm4_moe"}) {
    CAPTURE(fixture);
    Collector c;
    EngineConfig cfg = small_config();
    cfg.block_size = 4;  // does not divide the prompt lengths (5, 7, 12, ...)
    auto t = start_engine(fixture, cfg);
    REQUIRE(!t.log.empty());
    CHECK(t.log[0].rfind("KV pool: ", 0) == 0);
    CHECK(t.log[0].find("blocks of 4") != std::string::npos);
    CHECK(t.log[0].find("requests at max-model-len 64") != std::string::npos);
    const auto g = golden(fixture);
    std::vector<RequestId> ids;
    for (const auto& s : g) {
      auto id = t.engine->submit(greedy(s.prompt, static_cast<int>(s.greedy.size()), c.sink()));
      REQUIRE(id.ok());
      ids.push_back(id.value());
      c.wait(ids.size());  // one at a time
    }
    const auto out = c.outputs();
    for (size_t i = 0; i < g.size(); ++i) {
      CHECK(out.at(ids[i]).tokens == g[i].greedy);
      CHECK(out.at(ids[i]).finish == FinishReason::length);
      CHECK(out.at(ids[i]).events_after_finish == 0);
      for (float lp : out.at(ids[i]).logprobs) CHECK(lp <= 0.0f);
    }
    const auto m = t.engine->metrics();
    CHECK(m.requests_finished == static_cast<std::int64_t>(g.size()));
    CHECK(m.requests_running == 0);
    CHECK(m.requests_waiting == 0);
    CHECK(m.kv_blocks_used == 0);  // released blocks stay in the prefix cache but count as free
    CHECK(m.generation_tokens == 16 * static_cast<std::int64_t>(g.size()));
  }
}

TEST_CASE("a request stops at its own stop token, and at the model's EOS unless it ignores EOS") {
  Collector c;
  auto t = start_engine("glm4_moe", small_config());
  const auto g = golden("glm4_moe")[0];
  GenerateRequest r = greedy(g.prompt, 16, c.sink());
  r.stop_token_ids = {g.greedy[4]};
  auto id = t.engine->submit(r);
  REQUIRE(id.ok());
  c.wait(1);
  const auto o = c.outputs().at(id.value());
  const auto first = std::find(g.greedy.begin(), g.greedy.end(), g.greedy[4]);
  CHECK(o.tokens == std::vector<std::int32_t>(g.greedy.begin(), first + 1));
  CHECK(o.finish == FinishReason::stop);
}

TEST_CASE("the same seed gives the same sampled tokens; different seeds differ") {
  Collector c;
  auto t = start_engine("glm4_moe_lite", small_config());
  const auto g = golden("glm4_moe_lite")[1];
  auto sampled = [&](std::uint64_t seed) {
    GenerateRequest r = greedy(g.prompt, 24, c.sink());
    r.sampling = {1.0f, 0, 0.95f, 0.0f};
    r.seed = seed;
    auto id = t.engine->submit(r);
    REQUIRE(id.ok());
    return id.value();
  };
  // Submitted together, so they are batched with each other and with a greedy neighbour.
  const RequestId a = sampled(1234), b = sampled(1234), d = sampled(99);
  auto n = t.engine->submit(greedy(g.prompt, 24, c.sink()));
  REQUIRE(n.ok());
  c.wait(4);
  const auto out = c.outputs();
  CHECK(out.at(a).tokens.size() == 24);
  CHECK(out.at(a).tokens == out.at(b).tokens);
  CHECK(out.at(a).logprobs == out.at(b).logprobs);
  CHECK(out.at(a).tokens != out.at(d).tokens);
  CHECK(out.at(a).tokens != out.at(n.value()).tokens);
}

TEST_CASE("cancel frees the request's blocks at once and ends it with an abort event") {
  Collector c;
  EngineConfig cfg = small_config();
  cfg.max_model_len = 512;
  cfg.block_size = 4;
  cfg.enable_prefix_caching = false;
  std::mutex mu;
  std::condition_variable cv;
  int seen = 0;
  auto sink = c.sink();
  auto t = start_engine("glm4_moe", cfg);  // after what its callbacks use, so it stops first
  GenerateRequest r = greedy(golden("glm4_moe")[1].prompt, 400, [&](const TokenEvent& e) {
    sink(e);
    std::lock_guard lk(mu);
    ++seen;
    cv.notify_all();
  });
  auto id = t.engine->submit(r);
  REQUIRE(id.ok());
  {
    std::unique_lock lk(mu);
    REQUIRE(cv.wait_for(lk, std::chrono::minutes(2), [&] { return seen >= 3; }));
  }
  CHECK(t.engine->metrics().kv_blocks_used > 0);
  CHECK(t.engine->cancel(id.value()));
  CHECK(t.engine->metrics().kv_blocks_used == 0);  // before the worker even looks again
  CHECK(t.engine->metrics().requests_running == 0);
  CHECK_FALSE(t.engine->cancel(id.value()));
  c.wait(1);
  const auto o = c.outputs().at(id.value());
  CHECK(o.finish == FinishReason::abort);
  CHECK(o.tokens.size() < 400);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(c.outputs().at(id.value()).events_after_finish == 0);
  CHECK(t.engine->metrics().requests_aborted == 1);
}

TEST_CASE("requests the engine cannot serve are refused with a message, never queued") {
  Collector c;
  auto t = start_engine("glm4_moe", small_config());
  std::vector<std::int32_t> long_prompt(64, 5);
  auto r = t.engine->submit(greedy(long_prompt, 4, c.sink()));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("`max_model_len` is 64") != std::string::npos);
  CHECK(r.error().message.find("64 tokens") != std::string::npos);
  auto v = t.engine->submit(greedy({5, 400}, 4, c.sink()));
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().message.find("outside the vocabulary") != std::string::npos);
  GenerateRequest bad = greedy({5, 6}, 4, c.sink());
  bad.sampling.temperature = -1;
  auto b = t.engine->submit(bad);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message.find("temperature") != std::string::npos);
  auto e = t.engine->submit(greedy({}, 4, c.sink()));
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("empty") != std::string::npos);
  const auto m = t.engine->metrics();
  CHECK(m.requests_waiting == 0);
  CHECK(m.prompt_tokens == 0);
}

TEST_CASE("an engine whose pool cannot hold one max-model-len sequence does not start") {
  EngineConfig cfg = small_config();
  cfg.max_model_len = 256;
  auto m = load("glm4_moe");
  cfg.kv_cache_memory = bytes_for_blocks(*m, 15, 16);  // 240 tokens
  cfg.log = [](const std::string&) {};
  auto e = Engine::start(std::move(m), cfg);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("not one sequence of `max_model_len` 256") != std::string::npos);
  CHECK(e.error().message.find("`kv_cache_memory`") != std::string::npos);
  EngineConfig too_long = small_config();
  too_long.max_model_len = 100000;
  too_long.log = cfg.log;
  auto e2 = Engine::start(load("glm4_moe"), too_long);
  REQUIRE_FALSE(e2.ok());
  CHECK(e2.error().message.find("max_position_embeddings") != std::string::npos);
}
