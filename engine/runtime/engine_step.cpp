// One worker step: schedule under the lock; run the model and sample without it (cancel() and
// submit() stay responsive while the CPU computes); complete and collect events under it again.
//
// Running unlocked is safe because only this thread allocates blocks (schedule), so a block that
// cancel() frees mid-step cannot be handed to anyone else before the step ends, and rows written
// into it are never read: published prefix blocks are full and written before publication, so a
// step only writes rows past a sequence's written length, never into shared blocks.
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "engine.hpp"
#include "rank_messages.hpp"
#include "request_state.hpp"
#include "step_job.hpp"

namespace tandem::engine::runtime {

bool Engine::step(std::unique_lock<std::mutex>& lk) {
  const sched::Step st = schedule();
  if (st.empty()) return !st.preempted.empty();  // a preemption alone is progress; nothing is not
  std::vector<Job> jobs(st.work.size());
  std::vector<std::shared_ptr<RequestState>> reqs(st.work.size());
  gather_jobs(st, jobs, reqs);
  ++counters_.steps;

  lk.unlock();
  const auto t_model = std::chrono::steady_clock::now();
  const std::string group_failure = run_model(jobs);
  const double model_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_model).count();
  lk.lock();
  counters_.model_seconds += model_seconds;
  if (!group_failure.empty()) {
    go_fatal(group_failure);
    return true;
  }

  std::vector<PendingEvent> events;
  std::vector<std::vector<sched::Token>> emitted;
  record_jobs(jobs, reqs, events, emitted);
  complete(st, jobs, reqs, emitted, events);
  deliver(lk, std::move(events));
  return true;
}

sched::Step Engine::schedule() {
  // A decoding request drafts as far as its own acceptance says it pays; never under a constraint
  // (the mask must see each token before the next is chosen).
  const auto lookahead = [this](kv::SeqId id) {
    auto it = requests_.find(id);
    if (it == requests_.end() || !it->second->draft_len || it->second->req.constraint) return 0;
    const int k = it->second->draft_len->next(&step_cost_);
    if (k >= 0 && k < static_cast<int>(counters_.spec_chosen_length.size())) ++counters_.spec_chosen_length[static_cast<size_t>(k)];
    return k;
  };
  sched::Step st = drafting() ? sched_.schedule(lookahead) : sched_.schedule();
  for (kv::SeqId id : st.preempted)
    if (auto it = requests_.find(id); it != requests_.end()) it->second->kv_seen = 0;
  return st;
}

void Engine::gather_jobs(const sched::Step& st, std::vector<Job>& jobs, std::vector<std::shared_ptr<RequestState>>& reqs) {
  const auto scheduled_at = std::chrono::steady_clock::now();
  for (size_t i = 0; i < st.work.size(); ++i) {
    const sched::Work& w = st.work[i];
    Job& j = jobs[i];
    j.work = w;
    const auto& all = sched_.tokens(w.id);
    j.tokens.assign(all.begin() + w.start, all.begin() + w.start + w.count);
    j.table = kv_.block_table(w.id);
    reqs[i] = requests_.at(w.id);
    // Queue time ends at the first schedule; a preempted request's wait to resume is not queue time.
    if (!reqs[i]->queued_seconds)
      reqs[i]->queued_seconds = std::chrono::duration<double>(scheduled_at - reqs[i]->submitted).count();
    j.sampling = reqs[i]->req.sampling;
    j.constraint = reqs[i]->req.constraint;
    j.rng = &reqs[i]->rng;  // only this thread draws from it
    if (model_->kv_on_device()) {
      // The device keeps the state in the sequence's slot, and resets it when a step starts at 0.
      if (const auto slot = kv_.state_slot(w.id)) j.state_slot = *slot;
    } else if (const long floats = model_->kv_layout().state_floats; floats > 0) {
      // Under tensor parallelism the workers keep their part of the state in the sequence's slot.
      if (const auto slot = kv_.state_slot(w.id)) j.state_slot = *slot;
      // A sequence that starts over from token 0 starts from a zero state; one that resumes after a
      // prefix-cache hit, from the state kept at the end of that prefix.
      if (w.state_load >= 0) reqs[i]->recurrent = state_copies_.at(static_cast<size_t>(w.state_load));
      else if (w.start == 0) reqs[i]->recurrent.assign(static_cast<size_t>(floats), 0.f);
      j.state = reqs[i]->recurrent;
    }
    // A first chunk that starts past what we saw written got that much from the prefix cache.
    if (w.start > reqs[i]->kv_seen) counters_.prefix_cache_hit_tokens += w.start - reqs[i]->kv_seen;
    reqs[i]->kv_seen = w.start + w.count;
  }
}

std::string Engine::run_model(std::vector<Job>& jobs) {
  // The CPU reference runs sequences one after another; a device model (CUDA) runs them all in one
  // batched step (with a drafter on the device: one batched proposal, then that step verifies).
  // Under tensor parallelism each forward is announced to the worker ranks first, and any failure
  // is the group's: it ends the engine.
  if (model_->kv_on_device()) {
    // A device model (CUDA): every item in one batched forward (with a drafter on the device: one
    // batched proposal, then that step verifies). Under tensor parallelism the workers run each
    // target step too (its collectives pair with ours), so any failure of it is the group's.
    AnnounceStep announce;
    if (tp_)
      announce = [this](std::span<const model::PagedWork> work, StateSlots states) -> tandem::Status {
        RankMessage m;
        m.op = RankOp::device_step;
        m.keep_states.assign(states.keep.begin(), states.keep.end());
        m.restore_states.assign(states.restore.begin(), states.restore.end());
        for (const model::PagedWork& w : work) {
          StepItem it;
          it.start = w.start, it.state_slot = w.state_slot, it.logits = w.logits ? 1 : 0, it.all_logits = w.all_logits ? 1 : 0;
          it.state_load = w.state_load, it.state_save = w.state_save;
          it.tokens.assign(w.tokens.begin(), w.tokens.end());
          it.table.assign(w.block_table.begin(), w.block_table.end());
          m.items.push_back(std::move(it));
        }
        auto bytes = encode(m);
        if (auto s = model_->comm().broadcast(bytes, heartbeat_); !s)
          return model::error("announcing a step to the worker ranks: " + s.error().message);
        return Ok{};
      };
    if (device_drafter_) run_device_spec_step(*model_, *device_drafter_, jobs, announce);
    else run_device_step(*model_, jobs, announce);
    if (tp_)
      for (const Job& j : jobs)
        if (!j.error.empty()) return j.error;
    return {};
  }
  JobContext ctx{*model_, *pool_, draft_pool_.get(), drafter_.get(), {}};
  if (tp_)
    ctx.announce = [this](const Job& j, std::span<const std::int32_t> tokens, int logit_rows, StateOp op) -> tandem::Status {
      RankMessage m;
      m.op = RankOp::forward;
      m.start = j.work.start;
      // The workers keep their heads' part of the recurrent state in the sequence's slot.
      m.state_slot = j.state_slot, m.state_op = static_cast<std::uint8_t>(op);
      if (op == StateOp::none) m.state_load = j.work.state_load, m.state_save = j.work.state_save;
      m.tokens.assign(tokens.begin(), tokens.end());
      m.table = j.table;
      m.logit_rows = logit_rows;
      auto bytes = encode(m);
      return model_->comm().broadcast(bytes, heartbeat_);
    };
  for (Job& j : jobs) {
    run_job(ctx, j);
    if (j.group_failed) return j.error;
  }
  return {};
}

void Engine::record_jobs(const std::vector<Job>& jobs, const std::vector<std::shared_ptr<RequestState>>& reqs,
                         std::vector<PendingEvent>& events, std::vector<std::vector<sched::Token>>& emitted) {
  // A failed forward ends its request; the scheduler then skips it like a cancelled one.
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (!j.error.empty() && requests_.count(j.work.id)) {
      sched_.abort(j.work.id);
      requests_.erase(j.work.id);
      ++counters_.requests_aborted;
      events.push_back({reqs[i], TokenEvent{j.work.id, std::nullopt, 0.0f, FinishReason::abort, "model: " + j.error, 0, 0}});
    }
    // A chunk that ended at its prompt's last block boundary: keep the state there (CPU path; a
    // device model copied it after the step). The scheduler makes it findable when it completes.
    if (j.error.empty() && j.work.state_save >= 0 && !model_->kv_on_device()) {
      if (state_copies_.empty()) state_copies_.resize(static_cast<size_t>(kv_.state_snapshots().capacity()));
      state_copies_.at(static_cast<size_t>(j.work.state_save)).assign(j.state.begin(), j.state.end());
    }
    if (j.work.samples) emitted.push_back(j.error.empty() ? j.emitted : std::vector<sched::Token>{0});
    counters_.spec_draft_seconds += j.draft_seconds;
    counters_.spec_verify_seconds += j.verify_seconds;
    counters_.spec_context_seconds += j.context_seconds;
    if (j.error.empty() && j.forward_tokens > 0) {
      step_cost_.record_forward(j.forward_tokens, j.forward_seconds);
      if (j.drafted > 0) step_cost_.record_draft(j.draft_seconds);
    }
    // Speculation is counted as verified, whether or not a stop token cut the output short.
    if (j.drafted > 0 && j.error.empty()) record_speculation(j, *reqs[i]);
  }
}

void Engine::record_speculation(const Job& j, RequestState& r) {
  r.drafted += j.drafted;
  r.accepted += j.accepted;
  if (r.draft_len) r.draft_len->record(j.drafted, j.accepted);
  draft_prior_.record(j.drafted, j.accepted);
  ++counters_.spec_drafts;
  counters_.spec_draft_tokens += j.drafted;
  counters_.spec_accepted_tokens += j.accepted;
  for (int p = 0; p < j.drafted && p < num_spec_; ++p) {
    ++counters_.spec_drafted_at[static_cast<size_t>(p)];
    if (p < j.accepted) ++counters_.spec_accepted_at[static_cast<size_t>(p)];
  }
}

void Engine::complete(const sched::Step& st, const std::vector<Job>& jobs,
                      const std::vector<std::shared_ptr<RequestState>>& reqs,
                      const std::vector<std::vector<sched::Token>>& emitted, std::vector<PendingEvent>& events) {
  std::vector<int> taken;
  const auto finished = sched_.complete(
      st, emitted,
      [this](kv::SeqId id, sched::Token t) {
        auto it = requests_.find(id);
        if (it == requests_.end()) return false;
        const auto& c = it->second->req.constraint;  // a complete structured answer stops here too
        return it->second->stop.count(t) != 0 || (c && c->finished());
      },
      &taken);
  std::unordered_map<kv::SeqId, FinishReason> why;
  for (const auto& f : finished) why[f.id] = f.reason;

  size_t item = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (!j.work.samples) continue;
    const int kept = taken[item++];
    if (!j.error.empty()) continue;
    auto it = requests_.find(j.work.id);
    if (it == requests_.end()) continue;  // cancelled while the model ran
    const auto f = why.find(j.work.id);
    for (int t = 0; t < kept; ++t) {
      TokenEvent e{j.work.id, j.emitted[static_cast<size_t>(t)], j.logprobs[static_cast<size_t>(t)], FinishReason::none, "",
                   reqs[i]->drafted, reqs[i]->accepted, reqs[i]->queued_seconds.value_or(0), counters_.steps};
      if (t + 1 == kept && f != why.end()) e.finish = f->second;
      ++counters_.generation_tokens;
      events.push_back({reqs[i], std::move(e)});
    }
    if (f != why.end()) {
      requests_.erase(it);
      ++counters_.requests_finished;
    }
  }
}

}  // namespace tandem::engine::runtime
