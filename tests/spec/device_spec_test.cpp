// The engine's device path with a drafter (runtime/run_device_spec.cpp), run without a GPU: a model
// that keeps its "device" pool on the host and captures through the CPU forward, and a
// DeviceDrafter that wraps a CPU drafter over a host context pool. What the GPU adds (the kernels,
// the CUDA drafter) is checked by cuda_spec_check on a GPU; this checks the step's bookkeeping in CI:
// batched proposals, blocks verified with every row's logits beside prefill chunks, context rows
// for every token (rejected drafts' included), acceptance and rollback.
#include <doctest/doctest.h>

#include <algorithm>

#include "../comm/tp_group.hpp"
#include "../model/test_util.hpp"
#include "../runtime/engine_harness.hpp"
#include "../runtime/host_device_model.hpp"
#include "drafter_fixture.hpp"
#include "spec_run.hpp"
#include "engine.hpp"
#include "tandem/model/paged_kv.hpp"
#include "tandem/spec/device_drafter.hpp"
#include "worker_rank.hpp"

using namespace tandem;
using namespace tandem::engine::runtime;
using engine::runtime::test::Collector;
using engine::runtime::test::HostDeviceModel;
using spec::test::DemoPair;

namespace {

const std::vector<std::vector<std::int32_t>> kPrompts = {
    {3, 141, 59, 265, 35, 89}, {10, 20, 30}, {600, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, {77, 77, 77, 77}};

// A CPU drafter behind the DeviceDrafter interface, its context rows in a host pool.
class HostDrafter final : public spec::DeviceDrafter {
 public:
  HostDrafter(std::shared_ptr<const spec::Drafter> d, HostDeviceModel& target) : d_(std::move(d)), target_(target) {
    target_.capture_layers = d_->target_layers();
  }
  const std::vector<int>& target_layers() const override { return d_->target_layers(); }
  int max_draft() const override { return d_->max_draft(); }
  std::uint64_t context_bytes_per_token() const override {
    const auto l = d_->context_layout();
    return static_cast<std::uint64_t>(l.n_layers) * static_cast<std::uint64_t>(l.row_width) * 4u;
  }
  tandem::Status make_pool(std::int32_t num_blocks, int block_size) override {
    auto p = model::PagedKvPool::create(d_->context_layout(), num_blocks, block_size);
    if (!p) return p.error();
    pool_ = std::move(p).value();
    return Ok{};
  }
  tandem::Status add_context(std::span<const model::PagedWork> work) override {
    const size_t F = d_->target_layers().size() * static_cast<size_t>(target_.config().decoder().hidden_size);
    size_t at = 0;
    for (const auto& w : work) {
      model::PagedKvSequence seq(*pool_, w.block_table, w.start);
      std::vector<int> pos(w.tokens.size());
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = w.start + static_cast<int>(i);
      const std::span<const float> features(target_.captured.data() + at * F, pos.size() * F);
      if (auto s = d_->add_context(features, pos, seq); !s) return s;
      at += pos.size();
      context_rows += static_cast<int>(pos.size());
    }
    return Ok{};
  }
  tandem::Result<spec::Drafts> propose(std::span<const spec::DraftItem> items, bool logits) override {
    spec::Drafts out;
    const size_t V = static_cast<size_t>(target_.vocab_size());
    largest_batch = std::max(largest_batch, items.size());
    for (const auto& it : items) {
      model::PagedKvSequence seq(*pool_, it.block_table, it.pos);
      auto l = d_->propose(seq, it.anchor, it.pos, it.n);
      if (!l) return l.error();
      for (int r = 0; r < it.n; ++r) {
        const std::span<const float> row(l->data() + static_cast<size_t>(r) * V, V);
        out.tokens.push_back(static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
      }
      if (logits) out.logits.insert(out.logits.end(), l->begin(), l->end());
    }
    return out;
  }
  size_t largest_batch = 0;  // sequences in the largest proposal
  int context_rows = 0;

 private:
  std::shared_ptr<const spec::Drafter> d_;
  HostDeviceModel& target_;
  std::unique_ptr<model::PagedKvPool> pool_;
};

struct Setup {
  std::unique_ptr<Engine> engine;
  HostDeviceModel* model = nullptr;
  std::shared_ptr<HostDrafter> drafter;
};

// drafter null: plain decoding on the device path.
Setup start(const std::filesystem::path& target, std::shared_ptr<const spec::Drafter> drafter, int k,
            spec::DraftLengthPolicy policy = {.min_chance = 0.0, .use_cost = false}) {
  auto inner = model::load_model(target);
  REQUIRE(inner.ok());
  auto m = std::make_unique<HostDeviceModel>(std::move(inner).value(), 4);
  Setup s;
  s.model = m.get();
  EngineConfig cfg;
  cfg.max_model_len = 256;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 64;  // long prompts are prefilled in chunks
  cfg.kv_cache_memory = 64ull << 20;
  cfg.log = [](const std::string&) {};
  if (drafter) {
    s.drafter = std::make_shared<HostDrafter>(std::move(drafter), *m);
    cfg.device_drafter = s.drafter;
    cfg.num_speculative_tokens = k;
    cfg.draft_policy = policy;
  }
  auto e = Engine::start(std::move(m), cfg);
  REQUIRE_MESSAGE(e.ok(), (e.ok() ? "" : e.error().message));
  s.engine = std::move(e).value();
  return s;
}

using Run = spec::test::SpecRun;

// Every request runs to its max_tokens (ignore_eos): none may end otherwise.
Run run(Engine& e, const std::vector<std::vector<std::int32_t>>& prompts, int max_tokens, float temperature = 0.f) {
  Run r = spec::test::run_requests(e, prompts, max_tokens, temperature, 7);
  for (auto id : r.ids) CHECK(r.out.at(id).finish == FinishReason::length);
  return r;
}

}  // namespace

TEST_CASE("device path: greedy output with a random drafter equals plain decoding; proposals are batched") {
  DemoPair pair;
  auto plain = start(pair.target, nullptr, 0);
  const Run base = run(*plain.engine, kPrompts, 24);
  auto target = model::load_model(pair.target).value();
  std::shared_ptr<const spec::Drafter> drafter = spec::load_dflash(pair.drafter, pair.target, target->config()).value();
  auto s = start(pair.target, drafter, 7);
  const Run r = run(*s.engine, kPrompts, 24);
  CHECK(r.tokens() == base.tokens());
  // Each emitted token's logprob is its verified row's, as plain decoding gives it.
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const auto& got = r.out.at(r.ids[i]).logprobs;
    const auto& want = base.out.at(base.ids[i]).logprobs;
    REQUIRE(got.size() == want.size());
    for (size_t t = 0; t < got.size(); ++t) CHECK(got[t] == doctest::Approx(want[t]).epsilon(1e-4));
  }
  const auto m = s.engine->metrics();
  CHECK(m.spec_drafts > 0);
  CHECK(m.spec_drafts == s.model->verifications);  // every draft was verified in a step, once
  // Greedy verification reads back each row's pick (Model::step_sample), never the logits.
  CHECK(s.model->sample_steps > 0);
  CHECK(s.model->logit_steps == 0);
  CHECK(m.generation_tokens == 4 * 24);
  CHECK(m.kv_blocks_used == 0);          // the drafts' spare blocks came back too
  CHECK(s.drafter->largest_batch >= 2);  // concurrent requests drafted in one proposal
  // Context rows for every token each step ran: prompts, and whole verified blocks.
  std::int64_t prompt_tokens = 0;
  for (const auto& p : kPrompts) prompt_tokens += static_cast<std::int64_t>(p.size());
  CHECK(s.drafter->context_rows >= prompt_tokens + m.spec_drafts + m.spec_draft_tokens);
  // The batched proposal's seconds are booked once per step, within the step's; the context rows
  // are only enqueued on a device, so they are not timed apart there.
  CHECK(m.spec_draft_seconds > 0);
  CHECK(m.spec_context_seconds == 0);
  CHECK(m.spec_verify_seconds > 0);
  CHECK(m.model_seconds >= m.spec_draft_seconds + m.spec_verify_seconds);
}

TEST_CASE("device path: an oracle drafter is always accepted, a wrong draft is rejected where it is wrong, in one batch") {
  DemoPair pair;
  auto target = model::load_model(pair.target).value();
  auto plain = start(pair.target, nullptr, 0);
  const int N = 30;
  const Run base = run(*plain.engine, kPrompts, N);
  const auto continuations = base.tokens();
  std::vector<spec::test::OracleDrafter::Sequence> seqs;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    auto q = kPrompts[i];
    q.insert(q.end(), continuations[i].begin(), continuations[i].end());
    seqs.push_back({q, i == 1 ? 1 : -1});  // request 1's second draft is always wrong
  }
  auto oracle = std::make_shared<spec::test::OracleDrafter>(*target, seqs, 7);
  auto s = start(pair.target, oracle, 4);
  const Run r = run(*s.engine, kPrompts, N);
  CHECK(r.tokens() == base.tokens());
  const auto perfect = r.spec_of(0);
  CHECK(perfect.first > 0);
  CHECK(perfect.second == perfect.first);
  CHECK(perfect.first <= 4 * ((N - 1 + 4) / 5));  // 4 drafts + 1 bonus per step
  const auto wrong = r.spec_of(1);
  CHECK(wrong.second > 0);
  CHECK(wrong.second * 2 <= wrong.first);  // at most the first of each block's drafts
  const auto m = s.engine->metrics();
  CHECK(m.spec_accepted_at[0] == m.spec_drafted_at[0]);
  CHECK(m.spec_accepted_at[1] < m.spec_drafted_at[1]);
}

TEST_CASE("device path: sampled requests with a drafter finish with valid tokens and logprobs") {
  DemoPair pair;
  auto target = model::load_model(pair.target).value();
  std::shared_ptr<const spec::Drafter> drafter = spec::load_dflash(pair.drafter, pair.target, target->config()).value();
  auto s = start(pair.target, drafter, 5);
  const Run r = run(*s.engine, kPrompts, 20, 0.9f);
  for (const auto& t : r.tokens()) {
    CHECK(t.size() == 20u);
    for (auto id : t) CHECK((id >= 0 && id < 640));
  }
  CHECK(s.engine->metrics().spec_drafts > 0);
  CHECK(s.model->logit_steps > 0);  // sampling (and its acceptance) needs the distributions
}

TEST_CASE("a drafter must match where the model keeps its KV cache") {
  DemoPair pair;
  auto target = model::load_model(pair.target).value();
  std::shared_ptr<const spec::Drafter> drafter = spec::load_dflash(pair.drafter, pair.target, target->config()).value();
  EngineConfig cfg;
  cfg.max_model_len = 64;
  cfg.kv_cache_memory = 8ull << 20;
  cfg.log = [](const std::string&) {};
  cfg.num_speculative_tokens = 3;
  {  // a CPU drafter for a device model
    EngineConfig c = cfg;
    c.drafter = drafter;
    auto e = Engine::start(std::make_unique<HostDeviceModel>(model::load_model(pair.target).value()), c);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().message.find("device drafter") != std::string::npos);
  }
  {  // a device drafter for a model on the host
    HostDeviceModel holder(model::load_model(pair.target).value());
    EngineConfig c = cfg;
    c.device_drafter = std::make_shared<HostDrafter>(drafter, holder);
    auto e = Engine::start(model::load_model(pair.target).value(), c);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().message.find("`device` cuda") != std::string::npos);
  }
}

TEST_CASE("device path, hybrid model: a random drafter's rejected drafts are rolled out of the recurrent states") {
  // glm5_next_text keeps a recurrent state per sequence in a device slot; a verification folds
  // every drafted token into it. The engine keeps the drafting slots' states aside, restores the
  // ones that rejected a draft and advances them over the accepted tokens again: the output must
  // be plain decoding's, although almost every draft of a random drafter is rejected.
  const auto dir = model::test::fixture_dir("glm5_next_text");
  const std::vector<std::vector<std::int32_t>> prompts = {
      {5, 141, 59, 65, 35, 89}, {10, 20, 30}, {200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, {77, 77, 77, 77}};
  auto plain = start(dir, nullptr, 0);
  const Run base = run(*plain.engine, prompts, 24);
  auto target = model::load_model(dir).value();
  spec::test::TempDir tmp("device_hybrid_drafter");
  spec::test::write_random_drafter(tmp.path(), target->config(), {0, 2}, 8, 7);
  auto drafter = spec::load_dflash(tmp.path(), dir, target->config());
  REQUIRE_MESSAGE(drafter.ok(), (drafter.ok() ? "" : drafter.error().message));
  auto s = start(dir, std::move(drafter).value(), 7);
  const Run r = run(*s.engine, prompts, 24);
  CHECK(r.tokens() == base.tokens());
  const auto m = s.engine->metrics();
  CHECK(m.spec_drafts > 0);
  CHECK(m.spec_accepted_tokens < m.spec_draft_tokens);  // drafts were rejected ...
  CHECK(s.model->restores > 0);                          // ... and their states put back
  CHECK(s.model->slots_used.size() > 1);
  CHECK(m.kv_blocks_used == 0);
}

TEST_CASE("device path, hybrid model at TP2: rejected drafts are rolled out of the worker's states too") {
  // The head keeps the drafting slots' states before a verification and restores the rejecting
  // ones before the rollback's step; the worker, which holds its KDA heads' part of each state,
  // must do the same when told (the device step's keep and restore lists), or its heads go on
  // from states that saw the rejected drafts and the answers depart from plain decoding's.
  const auto dir = model::test::fixture_dir("glm5_next_text");
  const std::vector<std::vector<std::int32_t>> prompts = {{5, 141, 59, 65, 35, 89}, {10, 20, 30}, {200, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  auto plain = start(dir, nullptr, 0);
  const Run base = run(*plain.engine, prompts, 16);
  spec::test::TempDir tmp("device_hybrid_tp_drafter");
  spec::test::write_random_drafter(tmp.path(), model::load_model(dir).value()->config(), {0, 2}, 8, 7);
  std::vector<std::vector<std::int32_t>> got;
  int worker_restores = 0;
  std::int64_t rejected = 0;
  const auto ranks = comm::test::run_group<std::string>(
      2,
      [&](comm::Communicator& c) -> std::string {
        auto inner = model::load_model(dir, c);
        if (!inner) return "loading: " + inner.error().message;
        auto m = std::make_unique<HostDeviceModel>(std::move(inner).value(), 4);
        HostDeviceModel* device = m.get();
        if (c.rank() == 1) {
          auto s = run_worker_rank(*m, WorkerOptions{});
          worker_restores = device->restores;
          return s ? "" : "worker: " + s.error().message;
        }
        auto drafter = spec::load_dflash(tmp.path(), dir, m->config());
        if (!drafter) return "drafter: " + drafter.error().message;
        EngineConfig cfg;
        cfg.max_model_len = 256, cfg.max_num_seqs = 4, cfg.max_num_batched_tokens = 64;
        cfg.kv_cache_memory = 64ull << 20;
        cfg.log = [](const std::string&) {};
        cfg.device_drafter = std::make_shared<HostDrafter>(std::move(drafter).value(), *device);
        cfg.num_speculative_tokens = 7;
        cfg.draft_policy = {.min_chance = 0.0, .use_cost = false};
        auto e = Engine::start(std::move(m), cfg);
        if (!e) return "engine: " + e.error().message;
        got = run(*e.value(), prompts, 16).tokens();
        const auto mt = e.value()->metrics();
        rejected = mt.spec_draft_tokens - mt.spec_accepted_tokens;
        e.value().reset();  // tells the worker to shut down
        return "";
      },
      [](const std::string& e) { return "group: " + e; });
  CHECK_MESSAGE(ranks[0].empty(), ranks[0]);
  CHECK_MESSAGE(ranks[1].empty(), ranks[1]);
  CHECK(got == base.tokens());
  CHECK(rejected > 0);
  CHECK(worker_restores > 0);
}

TEST_CASE("device path, hybrid model: a drafter is refused when the model cannot restore its recurrent states") {
  const auto dir = model::test::fixture_dir("glm5_next_text");
  auto target = model::load_model(dir).value();
  spec::test::TempDir tmp("device_hybrid_refused");
  spec::test::write_random_drafter(tmp.path(), target->config(), {0, 2}, 8, 7);
  std::shared_ptr<const spec::Drafter> drafter = spec::load_dflash(tmp.path(), dir, target->config()).value();
  HostDeviceModel holder(model::load_model(dir).value());
  EngineConfig cfg;
  cfg.max_model_len = 64;
  cfg.kv_cache_memory = 8ull << 20;
  cfg.log = [](const std::string&) {};
  cfg.num_speculative_tokens = 3;
  cfg.device_drafter = std::make_shared<HostDrafter>(drafter, holder);
  auto e = Engine::start(std::make_unique<HostDeviceModel>(model::load_model(dir).value()), cfg);  // no state slots
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("cannot keep and restore its recurrent states") != std::string::npos);
}
