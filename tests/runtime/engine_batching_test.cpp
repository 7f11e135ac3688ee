// Many requests at once: continuous batching, chunked prefill, preemption and the prefix cache
// must not change any output. The reference is each prompt run alone (model::greedy_generate,
// contiguous cache, no scheduler).
#include <doctest/doctest.h>

#include <algorithm>
#include <thread>

#include "engine_harness.hpp"
#include "host_device_model.hpp"
#include "tandem/model/paged_kv.hpp"

using namespace tandem::engine::runtime;
using namespace tandem::engine::runtime::test;

namespace {

// 32 prompts from the fixture's golden prompts: some share long prefixes (prefix-cache hits),
// lengths vary so chunks and block boundaries fall everywhere.
std::vector<std::vector<std::int32_t>> prompts(const std::string& fixture, int n) {
  const auto g = golden(fixture);
  std::vector<std::vector<std::int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<std::int32_t> p = g[static_cast<size_t>(i) % g.size()].prompt;
    for (int k = 0; k < i / static_cast<int>(g.size()); ++k) p.push_back((17 * i + 31 * k) % 200 + 3);
    out.push_back(std::move(p));
  }
  return out;
}

struct Expected {
  std::vector<std::vector<std::int32_t>> prompt, output;
};

Expected alone(const std::string& fixture, int n, int (*max_tokens)(int)) {
  auto m = load(fixture);
  Expected e;
  e.prompt = prompts(fixture, n);
  for (int i = 0; i < n; ++i) {
    auto o = tandem::model::greedy_generate(*m, e.prompt[static_cast<size_t>(i)], max_tokens(i));
    REQUIRE(o.ok());
    e.output.push_back(o.value());
  }
  return e;
}

// Submits every prompt from `threads` threads at once and waits for all of them.
std::map<int, Collector::Output> run_all(Engine& engine, Collector& c, const Expected& e, int (*max_tokens)(int),
                                         int threads) {
  const int n = static_cast<int>(e.prompt.size());
  std::vector<RequestId> ids(static_cast<size_t>(n));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = t; i < n; i += threads) {
        auto id = engine.submit(greedy(e.prompt[static_cast<size_t>(i)], max_tokens(i), c.sink()));
        if (id.ok()) ids[static_cast<size_t>(i)] = id.value();
      }
    });
  for (auto& th : pool) th.join();
  for (RequestId id : ids) REQUIRE(id != 0);
  c.wait(static_cast<size_t>(n));
  const auto out = c.outputs();
  std::map<int, Collector::Output> by_index;
  for (int i = 0; i < n; ++i) by_index[i] = out.at(ids[static_cast<size_t>(i)]);
  return by_index;
}

int tokens_12_to_20(int i) { return 12 + i % 9; }

// A small engine for the device-path tests: 4 sequences of up to 64 tokens, chunks of 16, blocks of 4.
EngineConfig small_engine() {
  EngineConfig cfg;
  cfg.max_model_len = 64;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 16;
  cfg.block_size = 4;
  cfg.kv_cache_memory = std::uint64_t{4} << 20;
  return cfg;
}
int tokens_16(int) { return 16; }

}  // namespace

TEST_CASE("32 concurrent requests on max-num-seqs 4 all complete with the outputs each gives alone") {
  for (const char* fixture : {"glm4_moe_lite", "glm4_moe"}) {
    CAPTURE(fixture);
    const Expected e = alone(fixture, 32, tokens_12_to_20);
    Collector c;
    EngineConfig cfg;
    cfg.max_model_len = 64;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = 16;  // long prompts are prefilled in chunks
    cfg.block_size = 4;
    cfg.kv_cache_memory = std::uint64_t{4} << 20;
    auto t = start_engine(fixture, cfg);
    const auto out = run_all(*t.engine, c, e, tokens_12_to_20, 4);
    for (int i = 0; i < 32; ++i) {
      CAPTURE(i);
      CHECK(out.at(i).tokens == e.output[static_cast<size_t>(i)]);
      CHECK(out.at(i).finish == FinishReason::length);
      CHECK(out.at(i).events_after_finish == 0);
    }
    const auto m = t.engine->metrics();
    CHECK(m.requests_finished == 32);
    CHECK(m.requests_running == 0);
    CHECK(m.requests_waiting == 0);
    CHECK(m.kv_blocks_used == 0);
    std::int64_t prompt_tokens = 0, generated = 0;
    for (int i = 0; i < 32; ++i) {
      prompt_tokens += static_cast<std::int64_t>(e.prompt[static_cast<size_t>(i)].size());
      generated += tokens_12_to_20(i);
    }
    CHECK(m.prompt_tokens == prompt_tokens);
    CHECK(m.generation_tokens == generated);
    CHECK(m.prefix_cache_hit_tokens > 0);  // the prompts repeat each other's heads
  }
}

TEST_CASE("preemption under a tiny pool still gives every request its solo output") {
  for (const char* fixture : {"glm4_moe_lite", "glm4_moe"}) {
    CAPTURE(fixture);
    const Expected e = alone(fixture, 12, tokens_16);
    Collector c;
    EngineConfig cfg;
    cfg.max_model_len = 32;
    cfg.max_num_seqs = 4;
    cfg.block_size = 4;
    auto m = load(fixture);
    cfg.kv_cache_memory = bytes_for_blocks(*m, 8, 4, 4);  // 32 tokens: one full-length sequence
    cfg.kv_cache_dtype = "float32";
    auto t = start_engine(fixture, cfg);
    CHECK(t.log[0].find("KV pool: 32 tokens in 8 blocks of 4, 1.00 requests at max-model-len 32") == 0);
    CHECK(t.engine->metrics().kv_blocks_total == 8);
    const auto out = run_all(*t.engine, c, e, tokens_16, 2);
    for (int i = 0; i < 12; ++i) {
      CAPTURE(i);
      CHECK(out.at(i).tokens == e.output[static_cast<size_t>(i)]);
    }
    CHECK(t.engine->metrics().preemptions > 0);
    CHECK(t.engine->metrics().kv_blocks_used == 0);
  }
}

// Nine prompts of glm5_next_text (7, 12 and 5 tokens, extended), 16 tokens each, run alone.
Expected hybrid_alone(const std::string& fixture) {
  auto m = load(fixture);
  const auto g = golden(fixture);
  Expected e;
  for (int i = 0; i < 9; ++i) {
    std::vector<std::int32_t> p = g[static_cast<size_t>(i % 3)].prompt;
    for (int k = 0; k < i / 3; ++k) p.push_back((17 * i + 31 * k) % 200 + 3);
    auto o = tandem::model::greedy_generate(*m, p, 16);
    REQUIRE(o.ok());
    e.prompt.push_back(std::move(p));
    e.output.push_back(o.value());
  }
  return e;
}

// 4 sequences, 4 state slots and 32 tokens of fp32 rows: requests must be preempted. With
// `copies`, that many copies of the state kept for prefix caching too, beside the same 8 blocks.
EngineConfig hybrid_tiny_pool(const std::string& fixture, int copies = 0) {
  auto m = load(fixture);
  EngineConfig cfg;
  cfg.max_model_len = 32;
  cfg.max_num_seqs = 4;
  cfg.block_size = 4;
  const std::uint64_t state_bytes = static_cast<std::uint64_t>(m->kv_layout().state_floats) * 4u;
  REQUIRE(state_bytes > 0);
  cfg.kv_cache_memory = bytes_for_blocks(*m, 8, 4, 4) + (4 + static_cast<std::uint64_t>(copies)) * state_bytes;
  cfg.kv_cache_dtype = "float32";
  if (copies > 0) cfg.prefix_state_copies = copies;
  return cfg;
}

TEST_CASE("preemption of a hybrid model (recurrent state beside the KV rows) still gives every request its solo output") {
  // A preempted request is recomputed from token 0, so its recurrent state must start over from
  // zero, not continue from what the first attempt left in it.
  // With copies of the state kept for prefix caching (4 of them, beside the 8 blocks), a
  // readmitted request may resume from a copy instead: its own, or one of a prompt it shares.
  const std::string fixture = "glm5_next_text";
  const Expected e = hybrid_alone(fixture);
  for (const int copies : {0, 4}) {
    CAPTURE(copies);
    Collector c;
    auto t = start_engine(fixture, hybrid_tiny_pool(fixture, copies));
    CHECK(std::any_of(t.log.begin(), t.log.end(), [](const std::string& l) {
      return l.find("KV pool: 32 tokens in 8 blocks of 4, 1.00 requests at max-model-len 32") == 0;
    }));
    const auto out = run_all(*t.engine, c, e, tokens_16, 2);
    for (int i = 0; i < 9; ++i) {
      CAPTURE(i);
      CHECK(out.at(i).tokens == e.output[static_cast<size_t>(i)]);
    }
    CHECK(t.engine->metrics().preemptions > 0);
    CHECK(t.engine->metrics().kv_blocks_used == 0);
    if (copies > 0) CHECK(t.engine->metrics().prefix_cache_hit_tokens > 0);
  }
}

TEST_CASE("a request can bypass the prefix cache and still gets the same output") {
  const Expected e = alone("glm4_moe", 6, tokens_16);
  Collector c;
  EngineConfig cfg;
  cfg.max_model_len = 64;
  cfg.max_num_seqs = 2;
  cfg.block_size = 4;
  cfg.kv_cache_memory = std::uint64_t{1} << 20;
  auto t = start_engine("glm4_moe", cfg);
  // The same prompt three times in a row: hits with the cache, none when bypassing it.
  const auto& p = e.prompt[1];
  const std::int64_t whole_blocks = static_cast<std::int64_t>((p.size() - 1) / 4 * 4);  // last token recomputed
  size_t done = 0;
  for (bool use_cache : {true, true, false}) {
    GenerateRequest r = greedy(p, 16, c.sink());
    r.use_prefix_cache = use_cache;
    const auto before = t.engine->metrics().prefix_cache_hit_tokens;
    REQUIRE(t.engine->submit(r).ok());
    c.wait(++done);
    const auto hits = t.engine->metrics().prefix_cache_hit_tokens - before;
    CHECK(hits == (done == 2 ? whole_blocks : 0));
  }
  for (const auto& [id, o] : c.outputs()) CHECK(o.tokens == e.output[1]);
}

TEST_CASE("a device model gets each scheduler step as one batched step() and gives the solo outputs") {
  const Expected e = alone("glm4_moe_lite", 32, tokens_12_to_20);
  Collector c;
  EngineConfig cfg = small_engine();
  std::vector<std::string> log;
  cfg.log = [&log](const std::string& l) { log.push_back(l); };
  auto model = std::make_unique<HostDeviceModel>(load("glm4_moe_lite"));
  HostDeviceModel* device = model.get();
  auto engine = Engine::start(std::move(model), cfg);
  REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.error().message));
  const auto out = run_all(*engine.value(), c, e, tokens_12_to_20, 4);
  for (int i = 0; i < 32; ++i) {
    CAPTURE(i);
    CHECK(out.at(i).tokens == e.output[static_cast<size_t>(i)]);
    CHECK(out.at(i).finish == FinishReason::length);
  }
  CHECK(device->largest_step > 1);  // sequences were batched into one call
  // Unconstrained requests read back each row's token, never the logits.
  CHECK(device->sample_steps > 0);
  CHECK(device->logit_steps == 0);
  CHECK(std::any_of(log.begin(), log.end(), [](const std::string& l) { return l.find("KV pool storage: on the device") == 0; }));
  CHECK(engine.value()->metrics().kv_blocks_used == 0);
}

TEST_CASE("a device model samples seeded requests where the logits are and draws what the host draws") {
  // Each request's uniforms come from its own seeded generator, drawn on the host in the order the
  // host path draws them, so a device that samples (Model::step_sample) gives the same tokens and
  // logprobs as the CPU reference sampling the same logits.
  const auto ps = prompts("glm4_moe_lite", 6);
  int sample_steps = -1, logit_steps = -1;  // the device model's counts, read before the engine goes
  auto run_on = [&](std::unique_ptr<tandem::model::Model> model, const HostDeviceModel* device) {
    EngineConfig cfg = small_engine();
    cfg.log = [](const std::string&) {};
    auto engine = Engine::start(std::move(model), cfg);
    REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.error().message));
    Collector c;
    std::vector<RequestId> ids;
    for (size_t i = 0; i < ps.size(); ++i) {
      GenerateRequest r = greedy(ps[i], 12, c.sink());
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
      r.seed = 100 + i;
      auto id = engine.value()->submit(std::move(r));
      REQUIRE(id.ok());
      ids.push_back(id.value());
    }
    c.wait(ps.size());
    std::vector<Collector::Output> out;
    for (RequestId id : ids) out.push_back(c.outputs().at(id));
    if (device) sample_steps = device->sample_steps, logit_steps = device->logit_steps;
    return out;
  };
  auto device = std::make_unique<HostDeviceModel>(load("glm4_moe_lite"));
  const HostDeviceModel* watched = device.get();
  const auto on_device = run_on(std::move(device), watched);
  const auto on_host = run_on(load("glm4_moe_lite"), nullptr);
  for (size_t i = 0; i < ps.size(); ++i) {
    CAPTURE(i);
    CHECK(on_device[i].tokens.size() == 12u);
    CHECK(on_device[i].tokens == on_host[i].tokens);
    REQUIRE(on_device[i].logprobs.size() == on_host[i].logprobs.size());
    for (size_t t = 0; t < on_host[i].logprobs.size(); ++t) CHECK(on_device[i].logprobs[t] == doctest::Approx(on_host[i].logprobs[t]));
  }
  CHECK(sample_steps > 0);
  CHECK(logit_steps == 0);
}

TEST_CASE("a device model with a recurrent state gets a slot per running sequence, reset when the sequence starts over") {
  // The CUDA glm5_next keeps max_num_seqs state slots on the device: every running sequence must
  // name its own (two in one step may not share), and a preempted one starts over from a zero state
  // (or, with copies kept for prefix caching, from a copy the device loads into its slot).
  const std::string fixture = "glm5_next_text";
  const Expected e = hybrid_alone(fixture);
  for (const int copies : {0, 4}) {
    CAPTURE(copies);
    Collector c;
    const EngineConfig cfg = hybrid_tiny_pool(fixture, copies);
    auto model = std::make_unique<HostDeviceModel>(load(fixture), cfg.max_num_seqs);
    HostDeviceModel* device = model.get();
    auto engine = Engine::start(std::move(model), cfg);
    REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.error().message));
    const auto out = run_all(*engine.value(), c, e, tokens_16, 2);
    for (int i = 0; i < 9; ++i) {
      CAPTURE(i);
      CHECK(out.at(i).tokens == e.output[static_cast<size_t>(i)]);
      CHECK(out.at(i).finish == FinishReason::length);
    }
    CHECK(engine.value()->metrics().preemptions > 0);
    CHECK(engine.value()->metrics().requests_aborted == 0);
    CHECK(device->largest_step > 1);
    CHECK(device->slots_used.size() > 1);
    CHECK(engine.value()->metrics().kv_blocks_used == 0);
    CHECK((device->state_loads > 0) == (copies > 0));
  }
}
