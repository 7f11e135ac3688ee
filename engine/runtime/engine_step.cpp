// One worker step: schedule under the lock; run the model and sample without it (cancel() and
// submit() stay responsive while the CPU computes); complete and collect events under it again.
//
// Running unlocked is safe because only this thread allocates blocks (schedule), so a block that
// cancel() frees mid-step cannot be handed to anyone else before the step ends, and rows written
// into it are never read: published prefix blocks are full and written before publication, so a
// step only writes rows past a sequence's written length, never into shared blocks.
#include <algorithm>
#include <unordered_map>

#include "engine.hpp"
#include "rank_messages.hpp"
#include "request_state.hpp"

namespace tandem::engine::runtime {

namespace {

// What the model needs for one Work item, copied out while the lock is held.
struct Job {
  sched::Work work;
  std::vector<std::int32_t> tokens;  // tokens[start, start + count)
  std::vector<std::int32_t> table;   // block table at schedule time
  kernels::SamplingParams sampling;
  std::shared_ptr<TokenConstraint> constraint;
  std::mt19937_64* rng = nullptr;
  std::span<float> state;            // the request's recurrent state (only this thread touches it)
  kernels::Sampled sampled;
  std::string error;
};

}  // namespace

bool Engine::step(std::unique_lock<std::mutex>& lk) {
  const sched::Step st = sched_.schedule();
  for (kv::SeqId id : st.preempted)
    if (auto it = requests_.find(id); it != requests_.end()) it->second->kv_seen = 0;
  if (st.empty()) return !st.preempted.empty();  // a preemption alone is progress; nothing is not

  std::vector<Job> jobs(st.work.size());
  std::vector<std::shared_ptr<RequestState>> reqs(st.work.size());
  for (size_t i = 0; i < st.work.size(); ++i) {
    const sched::Work& w = st.work[i];
    Job& j = jobs[i];
    j.work = w;
    const auto& all = sched_.tokens(w.id);
    j.tokens.assign(all.begin() + w.start, all.begin() + w.start + w.count);
    j.table = kv_.block_table(w.id);
    reqs[i] = requests_.at(w.id);
    j.sampling = reqs[i]->req.sampling;
    j.constraint = reqs[i]->req.constraint;
    j.rng = &reqs[i]->rng;  // only this thread draws from it
    if (const long floats = model_->kv_layout().state_floats; floats > 0) {
      // A sequence that starts over from token 0 starts from a zero state.
      if (w.start == 0) reqs[i]->recurrent.assign(static_cast<size_t>(floats), 0.f);
      j.state = reqs[i]->recurrent;
    }
    // A first chunk that starts past what we saw written got that much from the prefix cache.
    if (w.start > reqs[i]->kv_seen) counters_.prefix_cache_hit_tokens += w.start - reqs[i]->kv_seen;
    reqs[i]->kv_seen = w.start + w.count;
  }
  ++counters_.steps;

  lk.unlock();
  // CPU reference: sequences one after another (a batched kernel comes with the CUDA back end).
  // Under tensor parallelism each forward is announced to the worker ranks first, and any failure
  // is the group's: it ends the engine.
  std::string group_failure;
  for (Job& j : jobs) {
    if (tp_) {
      RankMessage m;
      m.op = RankOp::forward;
      m.start = j.work.start;
      m.tokens = j.tokens;
      m.table = j.table;
      m.logits = j.work.samples;
      auto bytes = encode(m);
      if (auto s = model_->comm().broadcast(bytes, heartbeat_); !s) {
        group_failure = s.error().message;
        break;
      }
    }
    model::PagedKvSequence seq(*pool_, j.table, j.work.start, j.state);
    std::vector<std::int32_t> positions(static_cast<size_t>(j.work.count));
    for (int t = 0; t < j.work.count; ++t) positions[static_cast<size_t>(t)] = j.work.start + t;
    const int last = j.work.count - 1;
    auto logits = model_->forward(j.tokens, positions, seq,
                                  j.work.samples ? std::span<const int>(&last, 1) : std::span<const int>());
    if (!logits) {
      j.error = logits.error().message;
      if (tp_) {
        group_failure = j.error;
        break;
      }
      continue;
    }
    if (j.work.samples) {
      if (j.constraint) j.constraint->mask(logits.value());
      j.sampled = kernels::sample_cpu(logits.value(), j.sampling, *j.rng);
      if (j.constraint) j.constraint->advance(j.sampled.token);
    }
  }
  lk.lock();
  if (!group_failure.empty()) {
    go_fatal(group_failure);
    return true;
  }

  // A failed forward ends its request; the scheduler then skips it like a cancelled one.
  std::vector<PendingEvent> events;
  std::vector<sched::Token> sampled;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (!j.error.empty() && requests_.count(j.work.id)) {
      sched_.abort(j.work.id);
      requests_.erase(j.work.id);
      ++counters_.requests_aborted;
      events.push_back({reqs[i], TokenEvent{j.work.id, std::nullopt, 0.0f, FinishReason::abort, "model: " + j.error}});
    }
    if (j.work.samples) sampled.push_back(j.error.empty() ? j.sampled.token : 0);
  }
  const auto finished = sched_.complete(st, sampled, [this](kv::SeqId id, sched::Token t) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return false;
    const auto& c = it->second->req.constraint;  // a complete structured answer stops here too
    return it->second->stop.count(t) != 0 || (c && c->finished());
  });
  std::unordered_map<kv::SeqId, FinishReason> why;
  for (const auto& f : finished) why[f.id] = f.reason;

  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (!j.work.samples || !j.error.empty()) continue;
    auto it = requests_.find(j.work.id);
    if (it == requests_.end()) continue;  // cancelled while the model ran
    TokenEvent e{j.work.id, j.sampled.token, j.sampled.logprob, FinishReason::none, ""};
    ++counters_.generation_tokens;
    if (auto f = why.find(j.work.id); f != why.end()) {
      e.finish = f->second;
      requests_.erase(it);
      ++counters_.requests_finished;
    }
    events.push_back({reqs[i], std::move(e)});
  }
  deliver(lk, std::move(events));
  return true;
}

}  // namespace tandem::engine::runtime
