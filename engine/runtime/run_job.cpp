// A job's forward, plain or speculative.
//
// Plain: the target runs tokens[start, start+count) and, when the chunk reaches the end, one token
// is sampled. With a drafter, the same forward also captures the drafter's target layers, and
// their rows become the drafter's context rows for those positions (in the drafter pool, through
// the same block table), so the drafter's context always covers every token with target KV.
//
// Speculative (work.draft = k > 0; the one token to compute is the last committed one, the anchor):
//   1. the drafter proposes k tokens in one pass (argmax, or drawn from its distribution q);
//   2. the target runs [anchor, d1..dk] in one forward, with logits for every row and captures;
//   3. acceptance keeps d1..da and adds the target's own token (spec/acceptance.hpp);
//   4. the drafter gets context rows for the anchor and d1..da. Rows written for rejected drafts in
//      either pool lie beyond the sequence's written length, so the scheduler's KV bookkeeping
//      (advance to the kept tokens, trim the spare blocks) is the whole rollback.
// A hybrid model's recurrent state has no positions to trim: the verification folds every drafted
// token into it. So the state is copied before the verification and, when a draft was rejected,
// restored and advanced over the anchor and the accepted drafts alone (a second, shorter forward;
// the KV rows it writes are the same ones again). The state then equals that of plain decoding.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "step_job.hpp"
#include "tandem/spec/acceptance.hpp"

namespace tandem::engine::runtime {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::int32_t> positions_from(int start, int n) {
  std::vector<std::int32_t> p(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) p[static_cast<size_t>(t)] = start + t;
  return p;
}

// The drafter's context rows for `n` tokens from `start`, from the first n captured rows.
tandem::Status feed_drafter(const JobContext& ctx, Job& j, const model::HiddenCapture& cap, int start, int n) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t per_token = cap.layers.size() * static_cast<size_t>(ctx.model.config().decoder().hidden_size);
  model::PagedKvSequence seq(*ctx.draft_pool, j.table, start);
  const auto pos = positions_from(start, n);
  auto s = ctx.drafter->add_context(std::span<const float>(cap.rows.data(), per_token * static_cast<size_t>(n)), pos, seq);
  j.context_seconds += seconds_since(t0);
  return s;
}

}  // namespace

std::int32_t draw_draft(Job& j, std::span<const float> draft_logits, std::vector<double>& q) {
  auto qi = spec::sampling_distribution(draft_logits, j.sampling);
  const std::int32_t t = spec::draw(qi, *j.rng);
  q.insert(q.end(), qi.begin(), qi.end());
  return t;
}

void accept_block(Job& j, std::span<const std::int32_t> drafts, std::span<const double> q, std::span<const float> logits, int V) {
  const bool greedy = j.sampling.temperature == 0.0f;
  const spec::Verdict v = greedy ? spec::accept_greedy(drafts, logits, V) : spec::accept_sampled(drafts, q, logits, V, j.sampling, *j.rng);
  for (int i = 0; i <= v.accepted; ++i) {
    const std::int32_t t = i < v.accepted ? drafts[static_cast<size_t>(i)] : v.next;
    j.emitted.push_back(t);
    j.logprobs.push_back(kernels::raw_logprob(logits.subspan(static_cast<size_t>(i) * static_cast<size_t>(V), static_cast<size_t>(V)), t));
  }
  j.drafted = static_cast<int>(drafts.size());
  j.accepted = v.accepted;
}

void accept_block_picked(Job& j, std::span<const std::int32_t> drafts, std::span<const kernels::Sampled> rows) {
  std::vector<std::int32_t> want;
  for (const kernels::Sampled& r : rows) want.push_back(r.token);
  const spec::Verdict v = spec::accept_greedy_tokens(drafts, want);
  // Each kept draft equals its row's pick, and the next token is the next row's pick.
  for (int i = 0; i <= v.accepted; ++i) {
    j.emitted.push_back(rows[static_cast<size_t>(i)].token);
    j.logprobs.push_back(rows[static_cast<size_t>(i)].logprob);
  }
  j.drafted = static_cast<int>(drafts.size());
  j.accepted = v.accepted;
}

bool device_sampling_serves(const std::vector<Job>& jobs) {
  return std::none_of(jobs.begin(), jobs.end(), [](const Job& j) {
    return j.work.samples && (j.constraint || (j.work.draft > 0 && j.sampling.temperature != 0.0f));
  });
}

void add_sampling_rows(Job& j, int rows, bool drafted, std::vector<kernels::SamplingParams>& params, std::vector<double>& uniforms) {
  kernels::SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const bool draws = !drafted && j.sampling.temperature != 0.0f;
    params.push_back(draws ? j.sampling : greedy);
    uniforms.push_back(draws ? kernels::sampling_uniform(*j.rng) : 0.0);
  }
}

void sample_into(Job& j, std::vector<float>& logits) {
  if (j.constraint) j.constraint->mask(logits);
  const kernels::Sampled s = kernels::sample_cpu(logits, j.sampling, *j.rng);
  if (j.constraint) j.constraint->advance(s.token);
  j.emitted = {s.token};
  j.logprobs = {s.logprob};
}

namespace {

void run_plain(const JobContext& ctx, Job& j) {
  const int start = j.work.start, n = j.work.count;
  const int logit_rows = j.work.samples ? 1 : 0;
  if (ctx.announce)
    if (auto s = ctx.announce(j, j.tokens, logit_rows, StateOp::none); !s) {
      j.error = s.error().message;
      j.group_failed = true;
      return;
    }
  model::PagedKvSequence seq(ctx.pool, j.table, start, j.state);
  const auto positions = positions_from(start, n);
  const int last = n - 1;
  model::HiddenCapture cap;
  if (ctx.drafter) cap.layers = ctx.drafter->target_layers();
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = ctx.model.forward(j.tokens, positions, seq, j.work.samples ? std::span<const int>(&last, 1) : std::span<const int>(),
                                  ctx.drafter ? &cap : nullptr);
  if (n == 1 && j.work.samples) {
    j.forward_tokens = 1;
    j.forward_seconds = seconds_since(t0);
  }
  if (!logits) {
    j.error = logits.error().message;
    j.group_failed = static_cast<bool>(ctx.announce);
    return;
  }
  if (ctx.drafter)
    if (auto s = feed_drafter(ctx, j, cap, start, n); !s) {
      j.error = "drafter: " + s.error().message;
      return;
    }
  if (j.work.samples) sample_into(j, logits.value());
}

// Puts the recurrent state back to `before` and advances it over `kept` (from the job's start).
tandem::Status rewind_state(const JobContext& ctx, Job& j, const std::vector<float>& before, std::span<const std::int32_t> kept) {
  std::copy(before.begin(), before.end(), j.state.begin());
  if (ctx.announce)
    if (auto s = ctx.announce(j, kept, 0, StateOp::restore); !s) return s;
  model::PagedKvSequence seq(ctx.pool, j.table, j.work.start, j.state);
  const auto positions = positions_from(j.work.start, static_cast<int>(kept.size()));
  auto r = ctx.model.forward(kept, positions, seq, {});
  if (!r) return model::error("rolling the recurrent state back to the accepted tokens: " + r.error().message);
  return Ok{};
}

void run_speculative(const JobContext& ctx, Job& j) {
  const int start = j.work.start, k = j.work.draft;
  const int V = ctx.model.vocab_size();
  const std::int32_t anchor = j.tokens.back();
  const bool greedy = j.sampling.temperature == 0.0f;

  // 1. Draft.
  std::vector<std::int32_t> block{anchor};
  std::vector<double> q;  // sampled drafting: k rows of the drafter's distribution
  {
    const auto t0 = std::chrono::steady_clock::now();
    model::PagedKvSequence draft_seq(*ctx.draft_pool, j.table, start);
    auto dl = ctx.drafter->propose(draft_seq, anchor, start, k);
    if (!dl) {
      j.error = "drafter: " + dl.error().message;
      return;
    }
    const std::span<const float> all(dl.value());
    for (int i = 0; i < k; ++i) {
      const auto row = all.subspan(static_cast<size_t>(i) * static_cast<size_t>(V), static_cast<size_t>(V));
      block.push_back(greedy ? kernels::argmax_cpu(row).token : draw_draft(j, row, q));
    }
    j.draft_seconds = seconds_since(t0);
  }

  // 2. Verify: one target forward over the block.
  const int B = k + 1;
  if (ctx.announce)
    if (auto s = ctx.announce(j, block, B, j.state.empty() ? StateOp::none : StateOp::keep); !s) {
      j.error = s.error().message;
      j.group_failed = true;
      return;
    }
  const std::vector<float> state_before(j.state.begin(), j.state.end());
  model::PagedKvSequence seq(ctx.pool, j.table, start, j.state);
  const auto positions = positions_from(start, B);
  std::vector<int> rows(static_cast<size_t>(B));
  for (int r = 0; r < B; ++r) rows[static_cast<size_t>(r)] = r;
  model::HiddenCapture cap;
  cap.layers = ctx.drafter->target_layers();
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = ctx.model.forward(block, positions, seq, rows, &cap);
  j.forward_tokens = B;
  j.forward_seconds = seconds_since(t0);
  j.verify_seconds = j.forward_seconds;
  if (!logits) {
    j.error = logits.error().message;
    j.group_failed = static_cast<bool>(ctx.announce);
    return;
  }

  // 3. Accept.
  const std::span<const std::int32_t> drafts(block.data() + 1, static_cast<size_t>(k));
  accept_block(j, drafts, q, logits.value(), V);
  if (!j.state.empty() && j.accepted < k) {
    const auto t1 = std::chrono::steady_clock::now();
    if (auto s = rewind_state(ctx, j, state_before, std::span<const std::int32_t>(block.data(), static_cast<size_t>(j.accepted + 1)));
        !s) {
      j.error = s.error().message;
      j.group_failed = static_cast<bool>(ctx.announce);
      return;
    }
    j.verify_seconds += seconds_since(t1);
  }

  // 4. The drafter's context now covers the anchor and the accepted drafts.
  if (auto s = feed_drafter(ctx, j, cap, start, j.accepted + 1); !s) j.error = "drafter: " + s.error().message;
}

}  // namespace

model::PagedWork device_work(const Job& j) {
  model::PagedWork w{j.tokens, j.work.start, j.table, j.work.samples, j.state_slot};
  w.state_load = j.work.state_load;
  w.state_save = j.work.state_save;
  return w;
}

void run_device_step(model::Model& m, std::vector<Job>& jobs, const AnnounceStep& announce) {
  std::vector<model::PagedWork> work;
  for (const Job& j : jobs) work.push_back(device_work(j));
  if (announce)
    if (auto s = announce(work, {}); !s) {
      for (Job& j : jobs) j.error = s.error().message;
      return;
    }
  if (device_sampling_serves(jobs)) {
    std::vector<kernels::SamplingParams> params;
    std::vector<double> uniforms;
    for (Job& j : jobs)
      if (j.work.samples) add_sampling_rows(j, 1, false, params, uniforms);
    auto picks = m.step_sample(work, params, uniforms);
    size_t row = 0;
    for (Job& j : jobs) {
      if (!j.work.samples) continue;
      if (!picks || row >= picks->size()) {
        j.error = picks ? "the step returned fewer sampled tokens than items asking for one" : picks.error().message;
        continue;
      }
      j.emitted = {(*picks)[row].token};
      j.logprobs = {(*picks)[row].logprob};
      ++row;
    }
    return;
  }
  auto logits = m.step(work);
  if (!logits) {
    for (Job& j : jobs) j.error = logits.error().message;
    return;
  }
  const size_t V = static_cast<size_t>(m.vocab_size());
  size_t row = 0;
  for (Job& j : jobs) {
    if (!j.work.samples) continue;
    std::vector<float> mine(logits->begin() + static_cast<long>(row * V), logits->begin() + static_cast<long>((row + 1) * V));
    ++row;
    sample_into(j, mine);
  }
}

void run_job(const JobContext& ctx, Job& job) {
  if (job.work.draft > 0 && ctx.drafter && job.work.samples && job.work.count == 1) run_speculative(ctx, job);
  else run_plain(ctx, job);
}

}  // namespace tandem::engine::runtime
