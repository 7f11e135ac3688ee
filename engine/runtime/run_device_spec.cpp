// One step of a device model with a drafter on the same device (spec/device_drafter.hpp).
//
//   1. Draft: every job that drafts k > 0 tokens this step (a decode whose anchor is its one new
//      token) gets its proposal from one batched drafter forward (argmax on the device when greedy;
//      the drafter's logits come back only when some job samples, for its distribution q).
//   2. Verify: one target step runs every job's work, the drafting jobs' blocks [anchor, d1..dk]
//      with logits for every row (PagedWork::all_logits), capturing the drafter's target layers.
//   3. Context: the drafter writes context rows for every token of that step, the rejected drafts'
//      included (harmless: device_drafter.hpp says why), before the next step overwrites the capture.
//   4. Accept (spec/acceptance.hpp, as the CPU path) or sample, per job.
// Rollback is the scheduler's, as on the CPU path: rows past the kept tokens lie beyond the
// sequence's written length in both pools. A model with a recurrent state (glm5_next) also folded
// the rejected drafts into it: the drafting jobs' states are kept aside before step 2, and
//   5. Rewind: the jobs that rejected a draft get their kept state back and one more target step
//      (no logits) over their kept tokens, the anchor and the accepted drafts, which advances the
//      state as plain decoding would have (and writes the same KV rows again), as run_job.cpp's
//      rewind_state does on the CPU.
#include <algorithm>
#include <chrono>

#include "step_job.hpp"

namespace tandem::engine::runtime {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fail_all(std::vector<Job>& jobs, const std::string& why) {
  for (Job& j : jobs) j.error = why;
}

}  // namespace

// long-function: a speculative step's numbered phases (draft, verify, context, accept, rewind) share per-job state.
void run_device_spec_step(model::Model& m, spec::DeviceDrafter& drafter, std::vector<Job>& jobs, const AnnounceStep& announce) {
  const int V = m.vocab_size();
  const size_t Vs = static_cast<size_t>(V);

  // 1. Draft.
  std::vector<spec::DraftItem> items;
  std::vector<size_t> drafting;  // job index of each item
  bool any_sampled = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (j.work.draft <= 0 || !j.work.samples || j.work.count != 1) continue;
    items.push_back({j.tokens.back(), j.work.start, j.work.draft, j.table});
    drafting.push_back(i);
    any_sampled = any_sampled || j.sampling.temperature != 0.0f;
  }
  std::vector<std::vector<std::int32_t>> blocks(jobs.size());
  std::vector<std::vector<double>> q(jobs.size());
  double draft_seconds = 0, context_seconds = 0;
  if (!items.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    auto d = drafter.propose(items, any_sampled);
    if (!d) return fail_all(jobs, d.error().message);
    size_t row = 0;
    for (size_t x = 0; x < items.size(); ++x) {
      Job& j = jobs[drafting[x]];
      auto& block = blocks[drafting[x]];
      block.push_back(items[x].anchor);
      for (int i = 0; i < items[x].n; ++i, ++row) {
        if (j.sampling.temperature == 0.0f) {
          block.push_back(d->tokens[row]);
        } else {
          const std::span<const float> logits(d->logits.data() + row * Vs, Vs);
          block.push_back(draw_draft(j, logits, q[drafting[x]]));
        }
      }
    }
    // The context rows that waited for this proposal are every token's cost, not drafting's: the
    // adaptive length weighs the proposal alone (spec::StepCost).
    const double wall = seconds_since(t0);
    context_seconds = std::min(d->context_seconds, wall);
    draft_seconds = wall - context_seconds;
  }

  // 2. Verify (and run everyone else's work) in one target step.
  std::vector<model::PagedWork> work;
  bool decode_only = true;
  int widest = 1;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (!blocks[i].empty()) {
      work.push_back({blocks[i], j.work.start, j.table, false, j.state_slot, true});
      widest = std::max(widest, static_cast<int>(blocks[i].size()));
    } else {
      work.push_back(device_work(j));
      decode_only = decode_only && j.work.count == 1 && j.work.samples;
    }
  }
  const bool stateful = m.kv_layout().state_floats > 0;
  std::vector<int> kept_slots;
  if (stateful) {
    for (size_t i : drafting) kept_slots.push_back(jobs[i].state_slot);
    if (!kept_slots.empty())
      if (auto s = m.keep_states(kept_slots); !s) return fail_all(jobs, "keeping the recurrent states: " + s.error().message);
  }
  if (announce)
    if (auto s = announce(work, {.keep = kept_slots, .restore = {}}); !s) return fail_all(jobs, s.error().message);
  // The device samples each row (verified blocks greedily) unless some row's logits must come
  // back (Model::step_sample, device_sampling_serves).
  const bool picked = device_sampling_serves(jobs);
  std::vector<kernels::SamplingParams> params;
  std::vector<double> uniforms;
  if (picked) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!blocks[i].empty()) add_sampling_rows(jobs[i], static_cast<int>(blocks[i].size()), true, params, uniforms);
      else if (jobs[i].work.samples) add_sampling_rows(jobs[i], 1, false, params, uniforms);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::vector<kernels::Sampled>> picks = std::vector<kernels::Sampled>{};
  Result<std::vector<float>> logits = std::vector<float>{};
  if (picked) picks = m.step_sample(work, params, uniforms);
  else logits = m.step(work);
  double forward_seconds = seconds_since(t0);
  if (!picks) return fail_all(jobs, picks.error().message);
  if (!logits) return fail_all(jobs, logits.error().message);

  // 3. Context rows for every token the target just ran. The CUDA drafter copies the captured rows
  // aside and writes them before its next proposal, which times that pass apart
  // (Drafts::context_seconds, booked as Job::context_seconds).
  if (auto s = drafter.add_context(work); !s) return fail_all(jobs, s.error().message);

  // 4. Accept or sample.
  size_t row = 0;
  const size_t rows_back = picked ? picks->size() : logits->size() / Vs;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    const size_t want = !blocks[i].empty() ? blocks[i].size() : (j.work.samples ? 1 : 0);
    if (row + want > rows_back) return fail_all(jobs, "the verifying step returned fewer rows than its items ask for");
    if (picked) {
      const std::span<const kernels::Sampled> mine(picks->data() + row, want);
      row += want;
      if (!blocks[i].empty()) {
        accept_block_picked(j, std::span<const std::int32_t>(blocks[i]).subspan(1), mine);
      } else if (want == 1) {
        j.emitted = {mine[0].token};
        j.logprobs = {mine[0].logprob};
      }
      continue;
    }
    if (!blocks[i].empty()) {
      const size_t n = blocks[i].size();
      const std::span<const float> rows(logits->data() + row * Vs, n * Vs);
      row += n;
      accept_block(j, std::span<const std::int32_t>(blocks[i]).subspan(1), q[i], rows, V);
    } else if (j.work.samples) {
      std::vector<float> mine(logits->begin() + static_cast<long>(row * Vs), logits->begin() + static_cast<long>((row + 1) * Vs));
      ++row;
      sample_into(j, mine);
    }
  }

  // 5. Rewind the recurrent states that saw rejected drafts.
  if (stateful) {
    std::vector<model::PagedWork> rewind;
    std::vector<int> slots;
    for (size_t i : drafting) {
      const Job& j = jobs[i];
      if (j.accepted + 1 >= static_cast<int>(blocks[i].size())) continue;  // every draft kept
      const std::span<const std::int32_t> kept(blocks[i].data(), static_cast<size_t>(j.accepted + 1));
      rewind.push_back({kept, j.work.start, j.table, false, j.state_slot});
      slots.push_back(j.state_slot);
    }
    if (!rewind.empty()) {
      const auto t1 = std::chrono::steady_clock::now();
      if (auto s = m.restore_states(slots); !s) return fail_all(jobs, "restoring the recurrent states: " + s.error().message);
      if (announce)
        if (auto s = announce(rewind, {.keep = {}, .restore = slots}); !s) return fail_all(jobs, s.error().message);
      if (auto r = m.step(rewind); !r) return fail_all(jobs, "rolling the recurrent states back to the accepted tokens: " + r.error().message);
      forward_seconds += seconds_since(t1);  // part of what verifying cost (spec::StepCost)
    }
  }

  // The drafter's seconds are the step's, booked once, on the first drafting job (or the first
  // job), and so is the step's cost for the adaptive draft length (spec::StepCost), which is known
  // only for a step of decodes: such a step costs what its widest item costs.
  if (!jobs.empty()) {
    Job& j = drafting.empty() ? jobs.front() : jobs[drafting.front()];
    j.draft_seconds = draft_seconds;
    j.context_seconds = context_seconds;
    if (!drafting.empty()) j.verify_seconds = forward_seconds;
    if (decode_only) {
      j.forward_tokens = widest;
      j.forward_seconds = forward_seconds;
    }
  }
}

}  // namespace tandem::engine::runtime
