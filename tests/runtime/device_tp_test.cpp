// Tensor parallelism on the engine's device path (the CUDA model's), checked without a GPU: a TP2
// group over TCP on loopback whose ranks are HostDeviceModels (a device model whose "device" is the
// host) over the CPU path's slices. Rank 0 runs the engine; rank 1 the worker loop, which mirrors
// the pool (RankOp::pool -> make_device_pool) and runs each batched step the head announces
// (RankOp::device_step), taking part in its collectives. Outputs equal one rank's.
#include <doctest/doctest.h>

#include "../comm/tp_group.hpp"
#include "engine_harness.hpp"
#include "host_device_model.hpp"
#include "rank_messages.hpp"
#include "worker_rank.hpp"

using namespace tandem::engine::runtime;
using namespace tandem::engine::runtime::test;

TEST_CASE("a device step's message round-trips, and a truncated one is refused") {
  RankMessage m;
  m.op = RankOp::device_step;
  StepItem a, b;
  a.start = 7, a.state_slot = 2, a.state_load = 1, a.state_save = 0, a.logits = 1, a.tokens = {5}, a.table = {0, 3};
  b.start = 0, b.all_logits = 1, b.tokens = {1, 2, 3}, b.table = {4};
  m.items = {a, b};
  m.keep_states = {2, 0}, m.restore_states = {1};
  const auto bytes = encode(m);
  auto back = decode(bytes);
  REQUIRE(back.ok());
  REQUIRE(back->items.size() == 2);
  CHECK(back->items[0].start == 7);
  CHECK(back->items[0].state_slot == 2);
  CHECK(back->items[0].state_load == 1);
  CHECK(back->items[0].state_save == 0);
  CHECK(back->items[1].state_load == -1);
  CHECK(back->items[0].logits == 1);
  CHECK(back->items[0].table == std::vector<std::int32_t>{0, 3});
  CHECK(back->items[1].all_logits == 1);
  CHECK(back->items[1].tokens == std::vector<std::int32_t>{1, 2, 3});
  CHECK(back->keep_states == std::vector<std::int32_t>{2, 0});
  CHECK(back->restore_states == std::vector<std::int32_t>{1});
  auto cut = decode(std::span<const std::uint8_t>(bytes).first(bytes.size() - 3));
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().message.find("malformed") != std::string::npos);
  RankMessage pool;
  pool.op = RankOp::pool;
  pool.num_blocks = 40, pool.block_size = 4, pool.state_snapshots = 3;
  auto pool_back = decode(encode(pool));
  REQUIRE(pool_back.ok());
  CHECK(pool_back->num_blocks == 40);
  CHECK(pool_back->state_snapshots == 3);
}

namespace {

// TP2 on the device path over the glm4_moe_lite fixture's golden prompts: "" when rank r's outputs
// equal TP1's and it ran cleanly, else what went wrong. worker_blocks > 0: the KV blocks the
// worker's own flags allow (WorkerOptions::own_kv_blocks); logs[r]: rank r's log lines.
std::vector<std::string> run_tp2(std::int64_t worker_blocks, std::vector<std::vector<std::string>>& logs) {
  const std::string fixture = "glm4_moe_lite";
  const auto g = golden(fixture);
  constexpr int kTokens = 8;
  std::vector<std::vector<std::int32_t>> expect;
  {
    auto one = load(fixture);
    for (const auto& s : g) {
      auto o = tandem::model::greedy_generate(*one, s.prompt, kTokens);
      if (!o) return {"TP1: " + o.error().message, ""};
      expect.push_back(o.value());
    }
  }
  logs.assign(2, {});
  return tandem::comm::test::run_group<std::string>(
      2,
      [&](tandem::comm::Communicator& c) -> std::string {
        auto& lines = logs[static_cast<std::size_t>(c.rank())];
        auto inner = tandem::model::load_model(std::string(TANDEM_SOURCE_DIR) + "/tests/model/fixtures/" + fixture, c);
        if (!inner) return "loading: " + inner.error().message;
        auto model = std::make_unique<HostDeviceModel>(std::move(inner).value());
        if (c.rank() == 1) {
          WorkerOptions wo;
          wo.log = [&lines](const std::string& l) { lines.push_back(l); };
          if (worker_blocks > 0) wo.own_kv_blocks = [worker_blocks](int) -> tandem::Result<std::int64_t> { return worker_blocks; };
          auto s = run_worker_rank(*model, wo);
          return s ? "" : "worker: " + s.error().message;
        }
        EngineConfig cfg;
        cfg.max_model_len = 64, cfg.max_num_seqs = 4, cfg.max_num_batched_tokens = 16, cfg.block_size = 4;
        cfg.kv_cache_memory = std::uint64_t{4} << 20;
        cfg.log = [&lines](const std::string& l) { lines.push_back(l); };
        auto engine = Engine::start(std::move(model), cfg);
        if (!engine) return "engine: " + engine.error().message;
        Collector col;
        std::vector<RequestId> ids;
        for (const auto& s : g) {
          auto id = engine.value()->submit(greedy(s.prompt, kTokens, col.sink()));
          if (!id) return "submit: " + id.error().message;
          ids.push_back(id.value());
        }
        col.wait(ids.size());
        const auto out = col.outputs();
        std::string diff;
        for (size_t i = 0; i < ids.size(); ++i)
          if (out.at(ids[i]).tokens != expect[i]) diff += " sequence " + std::to_string(i) + " differs;";
        engine.value().reset();  // tells the worker to shut down
        return diff;
      },
      [](const std::string& e) { return "group: " + e; });
}

bool logged(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("TP2 on the device path: the worker runs the head's batched steps and the outputs equal TP1's") {
  std::vector<std::vector<std::string>> logs;
  const auto ranks = run_tp2(0, logs);
  CHECK_MESSAGE(ranks[0].empty(), ranks[0]);
  CHECK_MESSAGE(ranks[1].empty(), ranks[1]);
}

TEST_CASE("TP2 KV pool: each rank counts the blocks its own flags allow, and the group takes the smallest") {
  // The worker's flags allow 40 blocks, the head's 4 MiB far more: both pools get 40, and the head
  // schedules within them (the outputs still equal TP1's).
  std::vector<std::vector<std::string>> logs;
  const auto ranks = run_tp2(40, logs);
  CHECK_MESSAGE(ranks[0].empty(), ranks[0]);
  CHECK_MESSAGE(ranks[1].empty(), ranks[1]);
  for (const auto& lines : logs) {
    CHECK(logged(lines, ", rank 1 40 blocks; the group takes 40 (rank 0's block tables address every rank's pool)"));
  }
  CHECK(logged(logs[0], " tokens in 40 blocks of 4"));
  CHECK(logged(logs[1], "KV pool: 40 blocks of 4 tokens on the device"));
}

TEST_CASE("TP2 on the device path, a recurrent model: the worker resumes from and keeps the same state copies") {
  // glm5_next_text, each rank its KDA heads' part of the state. A prompt, then the same prompt
  // again: the second resumes from the copy kept at its last block boundary, on both ranks (the
  // pool message names the copies, each step item the copy to load or keep). Were the worker to
  // resume from anything else, its heads' partial sums, and the answer, would differ.
  const std::string fixture = "glm5_next_text";
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 14; ++i) prompt.push_back((5 * i + 9) % 200 + 3);
  std::vector<std::int32_t> expect;
  {
    auto one = load(fixture);
    auto o = tandem::model::greedy_generate(*one, prompt, 6);
    REQUIRE(o.ok());
    expect = o.value();
  }
  std::vector<std::string> worker_log;
  const auto ranks = tandem::comm::test::run_group<std::string>(
      2,
      [&](tandem::comm::Communicator& c) -> std::string {
        auto inner = tandem::model::load_model(std::string(TANDEM_SOURCE_DIR) + "/tests/model/fixtures/" + fixture, c);
        if (!inner) return "loading: " + inner.error().message;
        constexpr int kSeqs = 2;
        auto model = std::make_unique<HostDeviceModel>(std::move(inner).value(), kSeqs);
        const HostDeviceModel* device = model.get();
        if (c.rank() == 1) {
          WorkerOptions wo;
          wo.log = [&worker_log](const std::string& l) { worker_log.push_back(l); };
          auto s = run_worker_rank(*model, wo);
          if (!s) return "worker: " + s.error().message;
          return device->state_loads == 1 && device->state_saves == 1 ? "" : "worker: the copies were not loaded and kept once each";
        }
        EngineConfig cfg;
        cfg.max_model_len = 64, cfg.max_num_seqs = kSeqs, cfg.block_size = 4;
        cfg.kv_cache_memory = std::uint64_t{4} << 20;
        cfg.log = [](const std::string&) {};
        auto engine = Engine::start(std::move(model), cfg);
        if (!engine) return "engine: " + engine.error().message;
        std::string diff;
        for (int round = 0; round < 2; ++round) {
          Collector col;
          auto id = engine.value()->submit(greedy(prompt, 6, col.sink()));
          if (!id) return "submit: " + id.error().message;
          col.wait(1);
          if (col.outputs().at(id.value()).tokens != expect) diff += " round " + std::to_string(round) + " differs;";
        }
        if (engine.value()->metrics().prefix_cache_hit_tokens != 12) diff += " the second round did not resume at 12;";
        if (device->state_loads != 1 || device->state_saves != 1) diff += " rank 0 did not load and keep a copy once each;";
        engine.value().reset();
        return diff;
      },
      [](const std::string& e) { return "group: " + e; });
  CHECK_MESSAGE(ranks[0].empty(), ranks[0]);
  CHECK_MESSAGE(ranks[1].empty(), ranks[1]);
}

TEST_CASE("a recurrent model on the CPU path at TP2: the workers keep their part of each state") {
  // glm5_next_text over two CPU ranks, each holding its KDA heads' part of every sequence's state:
  // the head's in the request, the worker's in the slot each forward names (zeroed at token 0).
  // Three prompts at once, chunked (so states carry across steps), then the first again, which
  // resumes on both ranks from the copy kept at its last block boundary. Were a worker to lose or
  // mix up a state, its heads' partial sums, and the answers, would differ from one rank's.
  const std::string fixture = "glm5_next_text";
  std::vector<std::vector<std::int32_t>> prompts(3);
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 14 + 3 * p; ++i) prompts[static_cast<size_t>(p)].push_back((5 * i + 9 + 31 * p) % 200 + 3);
  prompts.push_back(prompts[0]);
  std::vector<std::vector<std::int32_t>> expect;
  {
    auto one = load(fixture);
    for (const auto& p : prompts) {
      auto o = tandem::model::greedy_generate(*one, p, 6);
      REQUIRE(o.ok());
      expect.push_back(o.value());
    }
  }
  const auto ranks = tandem::comm::test::run_group<std::string>(
      2,
      [&](tandem::comm::Communicator& c) -> std::string {
        auto m = tandem::model::load_model(std::string(TANDEM_SOURCE_DIR) + "/tests/model/fixtures/" + fixture, c);
        if (!m) return "loading: " + m.error().message;
        if (c.rank() == 1) {
          auto s = run_worker_rank(*m.value(), WorkerOptions{});
          return s ? "" : "worker: " + s.error().message;
        }
        EngineConfig cfg;
        cfg.max_model_len = 64, cfg.max_num_seqs = 3, cfg.block_size = 4, cfg.max_num_batched_tokens = 10;
        cfg.kv_cache_memory = std::uint64_t{4} << 20;
        cfg.log = [](const std::string&) {};
        auto engine = Engine::start(std::move(m).value(), cfg);
        if (!engine) return "engine: " + engine.error().message;
        std::string diff;
        auto run = [&](size_t first, size_t last) {
          Collector col;
          std::vector<RequestId> ids;
          for (size_t i = first; i < last; ++i) {
            auto id = engine.value()->submit(greedy(prompts[i], 6, col.sink()));
            if (!id) return diff += " submit: " + id.error().message, void();
            ids.push_back(id.value());
          }
          col.wait(ids.size());
          const auto out = col.outputs();
          for (size_t i = first; i < last; ++i) {
            const auto& o = out.at(ids[i - first]);
            if (!o.error.empty() || o.tokens != expect[i]) diff += " prompt " + std::to_string(i) + " differs (" + o.error + ");";
          }
        };
        run(0, 3);
        const auto before = engine.value()->metrics().prefix_cache_hit_tokens;
        run(3, 4);
        if (engine.value()->metrics().prefix_cache_hit_tokens - before != 12) diff += " the repeat did not resume at 12;";
        engine.value().reset();
        return diff;
      },
      [](const std::string& e) { return "group: " + e; });
  CHECK_MESSAGE(ranks[0].empty(), ranks[0]);
  CHECK_MESSAGE(ranks[1].empty(), ranks[1]);
}
