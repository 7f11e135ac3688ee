// Continuous batching. Every step the scheduler picks, within a token budget, which sequences
// advance and by how many tokens: running sequences first (one decode token each, or the next
// prefill chunk), then new requests. When the KV pool runs out, the most recently admitted
// running sequence is preempted: its blocks are freed and it is re-queued at the front to be
// recomputed later (prompt + what it had generated), so no output is lost.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv_manager.hpp"

namespace tandem::engine::sched {

using kv::SeqId;
using kv::Token;

struct SchedulerConfig {
  int max_num_seqs = 4;           // sequences in one step
  int max_batched_tokens = 2048;  // tokens computed in one step (prefill chunks + decodes)
  int max_model_len = 4096;
};

struct Request {
  SeqId id = 0;
  std::vector<Token> prompt;
  int max_tokens = 16;
  bool use_prefix_cache = true;
};

enum class FinishReason { none, length, stop, abort, model_len };

// One sequence's share of a step: compute KV (and logits) for tokens[start, start + count).
struct Work {
  SeqId id = 0;
  int start = 0;
  int count = 0;
  bool samples = false;  // the chunk reaches the last token: the step yields a new token
  // Speculative decoding: KV slots reserved after the `count` tokens for this many drafted tokens,
  // verified in the same forward. The step may then yield up to draft + 1 tokens.
  int draft = 0;
  // A model with a recurrent state under prefix caching (kv::StateSnapshots): the kept state to
  // start this chunk from (the sequence's first chunk after a prefix hit), and the copy to keep the
  // state in after it (the chunk ends at the prompt's last block boundary). -1: none.
  int state_load = -1;
  int state_save = -1;
};

struct Step {
  std::vector<Work> work;
  std::vector<SeqId> preempted;
  bool empty() const { return work.empty(); }
};

struct Finished {
  SeqId id;
  FinishReason reason;
  std::vector<Token> output;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, kv::KvManager& kv);

  // Queue a request. An error (empty prompt, prompt that leaves no room under max_model_len,
  // duplicate id) is returned, never thrown.
  std::optional<std::string> add(Request r);
  // Drop a request wherever it is (client went away); its blocks return to the pool.
  void abort(SeqId id);

  Step schedule();
  // The same, letting a decoding sequence reserve room for `lookahead(id)` drafted tokens (capped by
  // the step's token budget, the request's max_tokens and max_model_len; 0 when the pool is short).
  Step schedule(const std::function<int(SeqId)>& lookahead);
  // Report the sampled token of each `samples` work item of `step`, in order; `is_stop` says
  // whether a token ends its sequence. Returns the sequences that finished.
  std::vector<Finished> complete(const Step& step, const std::vector<Token>& sampled,
                                 const std::function<bool(Token)>& is_stop);
  // The same, with stop tokens per sequence (each request brings its own stop ids).
  std::vector<Finished> complete(const Step& step, const std::vector<Token>& sampled,
                                 const std::function<bool(SeqId, Token)>& is_stop);

  // Speculative steps: each `samples` work item yields one or more tokens (accepted drafts, then
  // the target's own). They are taken in order until one stops the sequence; `taken` (when given)
  // gets how many of each item's tokens were kept. KV is kept for every kept token but the last
  // (its KV is computed by the next step, as for plain decoding); reserved slots beyond are freed.
  std::vector<Finished> complete(const Step& step, const std::vector<std::vector<Token>>& emitted,
                                 const std::function<bool(SeqId, Token)>& is_stop, std::vector<int>* taken = nullptr);

  const std::vector<Token>& tokens(SeqId id) const { return seqs_.at(id).tokens; }
  std::size_t num_waiting() const { return waiting_.size(); }
  std::size_t num_running() const { return running_.size(); }
  std::int64_t preemptions() const { return preemptions_; }

 private:
  struct Seq {
    Request req;
    std::vector<Token> tokens;  // prompt + generated
    int generated = 0;
    int computed = 0;           // tokens whose KV is written
  };
  bool try_admit(SeqId id);
  // The chunk of `n` tokens from s.computed, cut where the sequence keeps a copy of its state.
  Work chunk(SeqId id, int n);
  void preempt(SeqId id);
  Finished finish(SeqId id, FinishReason why);

  SchedulerConfig cfg_;
  kv::KvManager& kv_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::deque<SeqId> waiting_;
  std::vector<SeqId> running_;  // admission order
  std::int64_t preemptions_ = 0;
};

const char* to_string(FinishReason r);

}  // namespace tandem::engine::sched
