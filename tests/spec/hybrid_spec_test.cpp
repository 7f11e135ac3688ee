// DFlash on a hybrid model (glm5_next_text: linear-attention layers with a recurrent state beside
// attention layers). A rejected draft has been folded into the recurrent state by the verification;
// the engine must put it back, or every later token is computed from a state that saw tokens the
// sequence never had. So: the same tokens AND the same logprobs as plain decoding, with drafts that
// are always partly rejected (an oracle that is wrong at a known position, and a random drafter).
#include <doctest/doctest.h>

#include <cmath>

#include "../comm/tp_group.hpp"
#include "../model/test_util.hpp"
#include "../runtime/engine_harness.hpp"
#include "drafter_fixture.hpp"
#include "engine.hpp"
#include "worker_rank.hpp"

using namespace tandem;
using namespace tandem::engine::runtime;
using engine::runtime::test::Collector;

namespace {

const char* kTarget = "glm5_next_text";
const std::vector<std::vector<std::int32_t>> kPrompts = {
    {5, 141, 59, 65, 35, 89}, {10, 20, 30}, {200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, {77, 77, 77, 77}};
constexpr int kTokens = 24;

std::unique_ptr<Engine> start(std::shared_ptr<const spec::Drafter> drafter, int k) {
  auto m = model::load_model(model::test::fixture_dir(kTarget));
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
  EngineConfig cfg;
  cfg.max_model_len = 128;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 8;  // the long prompt is prefilled in chunks
  cfg.kv_cache_memory = 64ull << 20;
  cfg.log = [](const std::string&) {};
  cfg.drafter = std::move(drafter);
  cfg.num_speculative_tokens = k;
  cfg.draft_policy = {.min_chance = 0.0, .use_cost = false};  // draft every step, however little is kept
  auto e = Engine::start(std::move(m).value(), cfg);
  REQUIRE_MESSAGE(e.ok(), (e.ok() ? "" : e.error().message));
  return std::move(e).value();
}

std::vector<Collector::Output> run(Engine& e) {
  Collector c;
  std::vector<RequestId> ids;
  for (const auto& p : kPrompts) {
    GenerateRequest g;
    g.prompt = p;
    g.max_tokens = kTokens;
    g.ignore_eos = true;
    g.sampling.temperature = 0.f;  // greedy
    g.on_event = c.sink();
    auto id = e.submit(std::move(g));
    REQUIRE(id.ok());
    ids.push_back(id.value());
  }
  c.wait(kPrompts.size());
  const auto out = c.outputs();
  std::vector<Collector::Output> r;
  for (auto id : ids) r.push_back(out.at(id));
  return r;
}

// Same tokens, and logprobs that agree to float rounding: the CPU forward of a block equals that
// of its tokens one at a time, so any larger gap is a state that saw something else.
void check_same(const std::vector<Collector::Output>& spec, const std::vector<Collector::Output>& plain) {
  REQUIRE(spec.size() == plain.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    CAPTURE(i);
    REQUIRE(spec[i].error.empty());
    CHECK(spec[i].tokens == plain[i].tokens);
    REQUIRE(spec[i].logprobs.size() == plain[i].logprobs.size());
    float worst = 0;
    for (size_t t = 0; t < spec[i].logprobs.size(); ++t) worst = std::max(worst, std::fabs(spec[i].logprobs[t] - plain[i].logprobs[t]));
    CHECK(worst <= 1e-4f);
  }
}

// What the oracle drafter proposes: each prompt's plain continuation, wrong at its first or second
// draft in turn, so every verification rejects some drafts.
std::vector<spec::test::OracleDrafter::Sequence> oracle_sequences(const std::vector<Collector::Output>& base) {
  std::vector<spec::test::OracleDrafter::Sequence> seqs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto s = kPrompts[i];
    s.insert(s.end(), base[i].tokens.begin(), base[i].tokens.end());
    seqs.push_back({s, i % 2 == 0 ? 1 : 2});
  }
  return seqs;
}

}  // namespace

TEST_CASE("hybrid model: an oracle drafter wrong at its second draft gives plain decoding's tokens and logprobs") {
  auto plain = start(nullptr, 0);
  const auto base = run(*plain);
  auto target = model::load_model(model::test::fixture_dir(kTarget)).value();
  auto e = start(std::make_shared<spec::test::OracleDrafter>(*target, oracle_sequences(base), 7), 4);
  check_same(run(*e), base);
  const auto m = e->metrics();
  CHECK(m.spec_drafts > 0);
  CHECK(m.spec_accepted_tokens > 0);                        // the right drafts were kept...
  CHECK(m.spec_accepted_tokens < m.spec_draft_tokens);      // ...and the wrong ones rolled back
  CHECK(m.spec_accepted_at[0] == m.spec_drafted_at[0]);
  CHECK(m.spec_accepted_at[2] == 0);
  CHECK(m.kv_blocks_used == 0);
}

TEST_CASE("hybrid model: a random DFlash drafter (mostly rejected) gives plain decoding's tokens and logprobs") {
  auto plain = start(nullptr, 0);
  const auto base = run(*plain);
  const auto dir = model::test::fixture_dir(kTarget);
  auto target = model::load_model(dir).value();
  spec::test::TempDir tmp("hybrid_drafter");
  spec::test::write_random_drafter(tmp.path(), target->config(), {0, 2}, 8, 7);
  auto drafter = spec::load_dflash(tmp.path(), dir, target->config());
  REQUIRE_MESSAGE(drafter.ok(), (drafter.ok() ? "" : drafter.error().message));
  auto e = start(std::move(drafter).value(), 7);
  check_same(run(*e), base);
  CHECK(e->metrics().spec_drafts > 0);
}

TEST_CASE("hybrid model at TP2 on the CPU: a rejected draft is rolled out of the worker's state too") {
  // The head keeps its part of the state before a verification and puts it back before the rollback's
  // forward; the worker must do the same with its part (StateOp keep / restore in each forward's
  // message), or its heads go on from a state that saw the rejected drafts.
  auto plain = start(nullptr, 0);
  const auto base = run(*plain);
  auto oracle_target = model::load_model(model::test::fixture_dir(kTarget)).value();
  auto drafter = std::make_shared<spec::test::OracleDrafter>(*oracle_target, oracle_sequences(base), 7);
  std::vector<Collector::Output> got;
  std::int64_t rejected = 0;
  const auto ranks = comm::test::run_group<std::string>(
      2,
      [&](comm::Communicator& c) -> std::string {
        auto m = model::load_model(model::test::fixture_dir(kTarget), c);
        if (!m) return "loading: " + m.error().message;
        if (c.rank() == 1) {
          auto s = run_worker_rank(*m.value(), WorkerOptions{});
          return s ? "" : "worker: " + s.error().message;
        }
        EngineConfig cfg;
        cfg.max_model_len = 128, cfg.max_num_seqs = 4, cfg.max_num_batched_tokens = 8;
        cfg.kv_cache_memory = 64ull << 20;
        cfg.log = [](const std::string&) {};
        cfg.drafter = drafter;
        cfg.num_speculative_tokens = 4;
        cfg.draft_policy = {.min_chance = 0.0, .use_cost = false};
        auto e = Engine::start(std::move(m).value(), cfg);
        if (!e) return "engine: " + e.error().message;
        got = run(*e.value());
        const auto mt = e.value()->metrics();
        rejected = mt.spec_draft_tokens - mt.spec_accepted_tokens;
        e.value().reset();
        return "";
      },
      [](const std::string& e) { return "group: " + e; });
  CHECK_MESSAGE(ranks[0].empty(), ranks[0]);
  CHECK_MESSAGE(ranks[1].empty(), ranks[1]);
  REQUIRE(got.size() == base.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].error == "");
    CHECK(got[i].tokens == base[i].tokens);
  }
  CHECK(rejected > 0);
}
