// The scheduler driven by a deterministic fake model: the next token is a function of the
// sequence so far, so any lost or repeated work shows up as different output.
#include <doctest/doctest.h>

#include <map>
#include <numeric>

#include "scheduler.hpp"

using namespace tandem::engine;
using namespace tandem::engine::sched;

namespace {

Token fake_next(const std::vector<Token>& seq) {
  std::uint64_t h = 7;
  for (Token t : seq) h = h * 31 + static_cast<std::uint64_t>(t);
  return static_cast<Token>(h % 1000);
}

std::vector<Token> prompt_of(int id, int len) {
  std::vector<Token> p(static_cast<size_t>(len));
  std::iota(p.begin(), p.end(), id * 1000);
  return p;
}

struct Run {
  std::map<SeqId, std::vector<Token>> outputs;
  int steps = 0;
  int max_batch_tokens = 0;
  int max_batch_seqs = 0;
  std::int64_t preemptions = 0;
};

// Drive the scheduler to completion; checks every step against the budget and the KV pool.
Run drive(Scheduler& s, kv::KvManager& kv, const SchedulerConfig& cfg, int limit_steps = 100000) {
  Run run;
  while ((s.num_waiting() || s.num_running()) && run.steps < limit_steps) {
    Step step = s.schedule();
    REQUIRE_MESSAGE(!step.empty(), "scheduler made no progress");
    int tokens = 0;
    std::vector<Token> sampled;
    for (const Work& w : step.work) {
      tokens += w.count;
      CHECK(kv.block_table(w.id).size() * static_cast<size_t>(kv.block_size()) >= static_cast<size_t>(w.start + w.count));
      if (w.samples) sampled.push_back(fake_next(s.tokens(w.id)));
    }
    CHECK(tokens <= cfg.max_batched_tokens);
    CHECK(static_cast<int>(step.work.size()) <= cfg.max_num_seqs);
    run.max_batch_tokens = std::max(run.max_batch_tokens, tokens);
    run.max_batch_seqs = std::max(run.max_batch_seqs, static_cast<int>(step.work.size()));
    for (auto& f : s.complete(step, sampled, [](Token t) { return t == 999; })) run.outputs[f.id] = f.output;
    ++run.steps;
  }
  run.preemptions = s.preemptions();
  return run;
}

std::vector<Token> reference_output(std::vector<Token> seq, int max_tokens) {
  std::vector<Token> out;
  for (int i = 0; i < max_tokens; ++i) {
    Token t = fake_next(seq);
    seq.push_back(t);
    out.push_back(t);
    if (t == 999) break;
  }
  return out;
}

}  // namespace

TEST_CASE("32 requests on max-num-seqs 4 all complete with the output plain decoding gives") {
  SchedulerConfig cfg{4, 256, 4096};
  kv::KvManager kv(512, 16, true);
  Scheduler s(cfg, kv);
  for (int i = 0; i < 32; ++i) REQUIRE_FALSE(s.add(Request{i, prompt_of(i, 20 + i), 12 + i % 5, true}));
  Run run = drive(s, kv, cfg);
  REQUIRE(run.outputs.size() == 32);
  for (int i = 0; i < 32; ++i) CHECK(run.outputs[i] == reference_output(prompt_of(i, 20 + i), 12 + i % 5));
  CHECK(run.max_batch_seqs == 4);
  CHECK(kv.free_blocks() == kv.total_blocks());
}

TEST_CASE("a long prompt is prefilled in chunks within the token budget") {
  SchedulerConfig cfg{2, 64, 4096};
  kv::KvManager kv(64, 16, false);
  Scheduler s(cfg, kv);
  REQUIRE_FALSE(s.add(Request{1, prompt_of(1, 300), 4, true}));
  Step first = s.schedule();
  REQUIRE(first.work.size() == 1);
  CHECK(first.work[0].count == 64);
  CHECK_FALSE(first.work[0].samples);
  s.complete(first, {}, [](Token) { return false; });
  Run run = drive(s, kv, cfg);
  CHECK(run.outputs[1] == reference_output(prompt_of(1, 300), 4));
  // 300 tokens = 64 x 4 + 44: four more chunks (the last one samples the first token), then 3 decodes.
  CHECK(run.steps == 4 + 3);
}

TEST_CASE("preemption under a small pool loses no output") {
  SchedulerConfig cfg{4, 512, 4096};
  kv::KvManager small(12, 16, false);  // 192 tokens for 4 sequences of ~100 tokens each
  Scheduler s(cfg, small);
  for (int i = 0; i < 6; ++i) REQUIRE_FALSE(s.add(Request{i, prompt_of(i, 40), 60, true}));
  Run run = drive(s, small, cfg);
  CHECK(run.preemptions > 0);
  REQUIRE(run.outputs.size() == 6);
  for (int i = 0; i < 6; ++i) CHECK(run.outputs[i] == reference_output(prompt_of(i, 40), 60));
  CHECK(small.free_blocks() == small.total_blocks());
}

TEST_CASE("abort mid-generation frees the sequence's blocks at once") {
  SchedulerConfig cfg{4, 256, 4096};
  kv::KvManager kv(32, 16, false);
  Scheduler s(cfg, kv);
  REQUIRE_FALSE(s.add(Request{1, prompt_of(1, 50), 100, true}));
  Step st = s.schedule();
  s.complete(st, {fake_next(s.tokens(1))}, [](Token) { return false; });
  CHECK(kv.free_blocks() < kv.total_blocks());
  s.abort(1);
  CHECK(kv.free_blocks() == kv.total_blocks());
  CHECK(s.num_running() == 0);
}

TEST_CASE("requests that cannot fit are refused with a reason, not crashed on") {
  SchedulerConfig cfg{4, 256, 100};
  kv::KvManager kv(32, 16, false);
  Scheduler s(cfg, kv);
  CHECK(s.add(Request{1, {}, 5, true}) == std::string("the prompt is empty"));
  CHECK(s.add(Request{2, prompt_of(2, 100), 5, true}) ==
        std::string("the prompt has 100 tokens; `max_model_len` is 100, so at most 99 prompt tokens leave room for an answer"));
  REQUIRE_FALSE(s.add(Request{3, prompt_of(3, 10), 5, true}));
  CHECK(s.add(Request{3, prompt_of(3, 10), 5, true}) == std::string("request id 3 is already queued"));
}

TEST_CASE("generation stops at max-model-len") {
  SchedulerConfig cfg{1, 256, 24};
  kv::KvManager kv(32, 16, false);
  Scheduler s(cfg, kv);
  REQUIRE_FALSE(s.add(Request{1, prompt_of(1, 20), 100, true}));
  Run run = drive(s, kv, cfg);
  CHECK(run.outputs[1].size() == 4);
}

TEST_CASE("shared prefixes are computed once") {
  SchedulerConfig cfg{4, 1024, 4096};
  kv::KvManager kv(64, 16, true);
  Scheduler s(cfg, kv);
  auto p = prompt_of(5, 64);
  REQUIRE_FALSE(s.add(Request{1, p, 2, true}));
  drive(s, kv, cfg);
  REQUIRE_FALSE(s.add(Request{2, p, 2, true}));
  Step st = s.schedule();
  REQUIRE(st.work.size() == 1);
  CHECK(st.work[0].start == 48);  // 3 of the 4 blocks reused; the last token is recomputed
  s.complete(st, {fake_next(s.tokens(2))}, [](Token) { return false; });
  REQUIRE_FALSE(s.add(Request{3, p, 2, false}));  // bypass
  Step st3 = s.schedule();
  for (const Work& w : st3.work)
    if (w.id == 3) CHECK(w.start == 0);
}

TEST_CASE("stop tokens can be per sequence") {
  SchedulerConfig cfg{4, 256, 4096};
  kv::KvManager kv(32, 16, false);
  Scheduler s(cfg, kv);
  REQUIRE_FALSE(s.add(Request{1, prompt_of(1, 8), 10, true}));
  REQUIRE_FALSE(s.add(Request{2, prompt_of(2, 8), 10, true}));
  Step st = s.schedule();
  REQUIRE(st.work.size() == 2);
  // The same token stops sequence 1 only.
  auto done = s.complete(st, {42, 42}, [](SeqId id, Token t) { return id == 1 && t == 42; });
  REQUIRE(done.size() == 1);
  CHECK(done[0].id == 1);
  CHECK(done[0].reason == FinishReason::stop);
  CHECK(s.num_running() == 1);
}

TEST_CASE("a recurrent model's prefill stops once at the prompt's last block boundary to keep its state") {
  // The state exists only between steps, so the chunk that would pass the boundary ends on it
  // (the rest follows next step); a later admission of the same prompt resumes there.
  SchedulerConfig cfg;
  cfg.max_num_seqs = 2;
  cfg.max_batched_tokens = 64;
  cfg.max_model_len = 128;
  kv::KvManager kv(64, 4, true, 0, 2);
  Scheduler s(cfg, kv);
  REQUIRE_FALSE(s.add(Request{1, prompt_of(1, 18), 2}));
  Step first = s.schedule();
  REQUIRE(first.work.size() == 1u);
  CHECK(first.work[0].count == 16);
  CHECK(first.work[0].state_save >= 0);
  CHECK(first.work[0].state_load == -1);
  CHECK_FALSE(first.work[0].samples);
  s.complete(first, std::vector<Token>{}, [](Token) { return false; });
  Step second = s.schedule();
  REQUIRE(second.work.size() == 1u);
  CHECK(second.work[0].start == 16);
  CHECK(second.work[0].count == 2);
  CHECK(second.work[0].state_save == -1);
  CHECK(second.work[0].samples);
  s.complete(second, std::vector<Token>{5}, [](Token) { return false; });
  // The same prompt now: its first chunk starts at 16 from the kept state, whole to the end.
  REQUIRE_FALSE(s.add(Request{2, prompt_of(1, 18), 1}));
  Step third = s.schedule();
  const Work* again = nullptr;
  for (const Work& w : third.work)
    if (w.id == 2) again = &w;
  REQUIRE(again);
  CHECK(again->start == 16);
  CHECK(again->count == 2);
  CHECK(again->state_load == first.work[0].state_save);
  CHECK(again->state_save == -1);
}
