#include "scheduler.hpp"

#include <algorithm>

namespace tandem::engine::sched {

Scheduler::Scheduler(SchedulerConfig cfg, kv::KvManager& kv) : cfg_(cfg), kv_(kv) {}

std::optional<std::string> Scheduler::add(Request r) {
  if (r.prompt.empty()) return "the prompt is empty";
  if (seqs_.count(r.id)) return "request id " + std::to_string(r.id) + " is already queued";
  const auto len = static_cast<long>(r.prompt.size());
  if (len >= cfg_.max_model_len)
    return "the prompt has " + std::to_string(len) + " tokens; `max_model_len` is " +
           std::to_string(cfg_.max_model_len) + ", so at most " + std::to_string(cfg_.max_model_len - 1) +
           " prompt tokens leave room for an answer";
  if (r.max_tokens < 1) return "max_tokens must be at least 1";
  Seq s;
  s.tokens = r.prompt;
  s.req = std::move(r);
  SeqId id = s.req.id;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  return std::nullopt;
}

void Scheduler::abort(SeqId id) {
  if (!seqs_.count(id)) return;
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  kv_.release(id);
  seqs_.erase(id);
}

bool Scheduler::try_admit(SeqId id) {
  Seq& s = seqs_.at(id);
  auto cached = kv_.admit(id, s.tokens, s.req.use_prefix_cache);
  if (!cached) return false;
  s.computed = *cached;
  return true;
}

void Scheduler::preempt(SeqId id) {
  Seq& s = seqs_.at(id);
  kv_.release(id);
  s.computed = 0;  // recompute prompt + generated tokens when readmitted
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.push_front(id);
  ++preemptions_;
}

Work Scheduler::chunk(SeqId id, int n) {
  const Seq& s = seqs_.at(id);
  Work w{id, s.computed, n, false};
  // A recurrent model keeps its state at one block boundary of the prompt: the chunk that would
  // pass it stops there (the rest follows next step), since a state exists only between steps.
  if (const int at = kv_.state_boundary(id); at > s.computed && at <= s.computed + n)
    if (const auto copy = kv_.begin_state_save(id)) {
      w.count = at - s.computed;
      w.state_save = *copy;
    }
  if (const auto kept = kv_.take_state_load(id)) w.state_load = *kept;
  w.samples = w.start + w.count == static_cast<int>(s.tokens.size());
  return w;
}

Step Scheduler::schedule() { return schedule({}); }

Step Scheduler::schedule(const std::function<int(SeqId)>& lookahead) {
  Step step;
  int budget = cfg_.max_batched_tokens;

  // Running sequences, oldest first. Each needs its remaining prefill or one decode token.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SeqId id = running_[i];
    Seq& s = seqs_.at(id);
    const int remaining = static_cast<int>(s.tokens.size()) - s.computed;
    Work w = chunk(id, std::min(remaining, budget));
    const int n = w.count;
    int draft = 0;
    if (remaining == 1 && lookahead) {
      const int len = static_cast<int>(s.tokens.size());
      draft = std::min({lookahead(id), budget - 1, s.req.max_tokens - s.generated - 1, cfg_.max_model_len - len - 1});
      if (draft < 0 || !kv_.reserve(id, 1 + draft)) draft = 0;  // short of blocks: decode plainly
    }
    while (!kv_.reserve(id, n)) {
      // Out of blocks: preempt the newest running sequence (possibly this one).
      SeqId victim = running_.back();
      preempt(victim);
      step.preempted.push_back(victim);
      if (victim == id) break;
    }
    if (std::find(running_.begin(), running_.end(), id) == running_.end()) continue;  // preempted itself
    w.draft = draft;
    step.work.push_back(w);
    budget -= n + draft;
    ++i;
  }

  // New (or preempted) sequences, in queue order, while there is room.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
    SeqId id = waiting_.front();
    // Preempted sequences were pushed back during this step: do not readmit them in the same step.
    if (std::find(step.preempted.begin(), step.preempted.end(), id) != step.preempted.end()) break;
    if (!try_admit(id)) break;
    Seq& s = seqs_.at(id);
    const int remaining = static_cast<int>(s.tokens.size()) - s.computed;
    const Work w = chunk(id, std::min(remaining, budget));
    if (!kv_.reserve(id, w.count)) {
      kv_.release(id);
      break;
    }
    waiting_.pop_front();
    running_.push_back(id);
    step.work.push_back(w);
    budget -= w.count;
  }
  return step;
}

Finished Scheduler::finish(SeqId id, FinishReason why) {
  Seq& s = seqs_.at(id);
  Finished f{id, why, std::vector<Token>(s.tokens.end() - s.generated, s.tokens.end())};
  kv_.release(id);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  seqs_.erase(id);
  return f;
}

std::vector<Finished> Scheduler::complete(const Step& step, const std::vector<Token>& sampled,
                                          const std::function<bool(Token)>& is_stop) {
  return complete(step, sampled, std::function<bool(SeqId, Token)>([&is_stop](SeqId, Token t) { return is_stop(t); }));
}

std::vector<Finished> Scheduler::complete(const Step& step, const std::vector<Token>& sampled,
                                          const std::function<bool(SeqId, Token)>& is_stop) {
  std::vector<std::vector<Token>> emitted;
  emitted.reserve(sampled.size());
  for (Token t : sampled) emitted.push_back({t});
  return complete(step, emitted, is_stop);
}

std::vector<Finished> Scheduler::complete(const Step& step, const std::vector<std::vector<Token>>& emitted,
                                          const std::function<bool(SeqId, Token)>& is_stop, std::vector<int>* taken) {
  std::vector<Finished> done;
  size_t next = 0;
  if (taken) taken->assign(emitted.size(), 0);
  for (const Work& w : step.work) {
    auto it = seqs_.find(w.id);
    if (it == seqs_.end()) {  // aborted while the step ran
      if (w.samples) ++next;
      continue;
    }
    Seq& s = it->second;
    if (!w.samples) {
      s.computed = w.start + w.count;
      kv_.advance(w.id, s.tokens, s.computed);
      continue;
    }
    const size_t item = next++;
    const auto& out = emitted.at(item);
    std::optional<FinishReason> why;
    int kept = 0;
    for (Token t : out) {
      s.tokens.push_back(t);
      ++s.generated;
      ++kept;
      if (is_stop(w.id, t)) why = FinishReason::stop;
      else if (s.generated >= s.req.max_tokens) why = FinishReason::length;
      else if (static_cast<int>(s.tokens.size()) >= cfg_.max_model_len) why = FinishReason::model_len;
      if (why) break;
    }
    if (taken) (*taken)[item] = kept;
    // KV is valid for the step's tokens and every kept draft; the last kept token has none yet.
    s.computed = w.start + w.count + std::max(kept - 1, 0);
    kv_.advance(w.id, s.tokens, s.computed);
    if (why) {
      done.push_back(finish(w.id, *why));
    } else if (w.draft > 0) {
      kv_.trim(w.id);  // rejected drafts: their slots go back to the pool
    }
  }
  return done;
}

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::abort: return "abort";
    case FinishReason::model_len: return "length";
  }
  return "none";
}

}  // namespace tandem::engine::sched
