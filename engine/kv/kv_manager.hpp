// Per-sequence view of the KV pool: block tables, how many tokens have KV written, prefix-cache
// reuse at admission, and room for speculative tokens that may be rolled back.
//
// Two pools sit side by side and never share a page size: paged attention blocks (BlockPool)
// and fixed-size per-sequence state slots (StateSlots) for recurrent/linear-attention layers.
// Neither is padded to a least common multiple of the other.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "block_pool.hpp"
#include "state_snapshots.hpp"

namespace tandem::engine::kv {

using SeqId = std::int64_t;

// Fixed-size recurrent state, one slot per live sequence.
class StateSlots {
 public:
  explicit StateSlots(std::int32_t num_slots);
  std::optional<std::int32_t> acquire();
  void release(std::int32_t slot);
  std::int32_t num_free() const { return static_cast<std::int32_t>(free_.size()); }
  std::int32_t num_slots() const { return num_slots_; }

 private:
  std::int32_t num_slots_;
  std::vector<std::int32_t> free_;
};

class KvManager {
 public:
  // `state_slots`: a device model's recurrent-state slots, one per live sequence (0: none, or the
  // state lives with the request). `state_snapshots`: for a model with a recurrent state, how many
  // copies of it prefix caching keeps (see below); -1: the model has none, blocks alone make a hit.
  KvManager(std::int32_t num_blocks, int block_size, bool prefix_cache, std::int32_t state_slots = 0,
            int state_snapshots = -1);

  int block_size() const { return pool_.block_size(); }
  std::int32_t free_blocks() const { return pool_.num_available(); }
  std::int32_t total_blocks() const { return pool_.num_blocks(); }
  const BlockPool& pool() const { return pool_; }

  // Admit a sequence. With the prefix cache on (and not bypassed), whole blocks of `prompt`
  // already in the pool are shared; returns how many prompt tokens need no prefill. At least the
  // last prompt token is always recomputed, since its logits are needed.
  // nullopt when a state slot is needed and none is free (nothing changed).
  //
  // A model with a recurrent state: blocks alone cannot restore the state, so the shared prefix
  // ends at the longest block boundary where a copy of the state was kept (take_state_load names
  // it), and the sequence keeps a copy of its own at the last block boundary of its prompt
  // (state_boundary) unless one of that prefix is kept already.
  std::optional<int> admit(SeqId id, std::span<const Token> prompt, bool use_prefix_cache);

  // The kept state the sequence's first step starts from (copied into its state before the step);
  // handed out once, and held until the step completes (advance) or the sequence leaves.
  std::optional<int> take_state_load(SeqId id);
  // Where the sequence should keep a copy of its state (its prefill stops there for one step), or 0.
  // While its copy is being written this stays the boundary, which the sequence has then reached.
  int state_boundary(SeqId id) const { return seqs_.at(id).state_boundary; }
  // A copy to write the state into once the sequence has computed state_boundary tokens (the copy
  // follows that step); it becomes findable when advance() reaches the boundary. nullopt: every
  // copy is in use; the sequence then keeps none. Once per admission.
  std::optional<int> begin_state_save(SeqId id);
  const StateSnapshots& state_snapshots() const { return snapshots_; }

  // Blocks needed to hold `n` more tokens of KV beyond what is written.
  std::int32_t blocks_needed(SeqId id, int n) const;
  // Make room for `n` more tokens; false (and nothing changed) if the pool is short.
  bool reserve(SeqId id, int n);
  // KV for tokens[0, new_len) is now valid (after a forward, after verification). Full blocks
  // are published to the prefix cache (and a state copy begun at this length). `tokens` is the
  // sequence's full token list.
  void advance(SeqId id, std::span<const Token> tokens, int new_len);
  // Drop reserved blocks beyond the written length (rejected speculative tokens, aborted chunk).
  void trim(SeqId id);
  void release(SeqId id);

  bool contains(SeqId id) const { return seqs_.count(id) != 0; }
  int written(SeqId id) const { return seqs_.at(id).written; }
  const std::vector<BlockId>& block_table(SeqId id) const { return seqs_.at(id).blocks; }
  std::optional<std::int32_t> state_slot(SeqId id) const { return seqs_.at(id).state_slot; }

 private:
  struct Seq {
    std::vector<BlockId> blocks;
    std::vector<std::uint64_t> hashes;  // chain hash of each published full block
    int written = 0;
    bool cacheable = true;
    std::optional<std::int32_t> state_slot;
    std::optional<int> state_load;   // a kept state to start from (pinned)
    bool state_loading = false;      // handed to a step: unpinned when it completes
    int state_boundary = 0;          // where to keep a copy of the state (0: nowhere, or kept)
    std::optional<int> state_save;   // the copy being written, at state_boundary tokens
  };
  // Cuts a recurrent model's prefix hit back to a boundary with a kept state; the hit blocks past
  // it go back. `chain`: the chain hash of each of the prompt's usable blocks.
  void cut_to_kept_state(Seq& seq, std::span<const Token> prompt, const std::vector<std::uint64_t>& chain);
  void drop_state_pins(Seq& seq);

  BlockPool pool_;
  StateSlots states_;
  bool prefix_cache_;
  bool recurrent_;  // hits need a kept state (state_snapshots >= 0)
  StateSnapshots snapshots_;
  std::unordered_map<SeqId, Seq> seqs_;
};

// How many tokens a KV budget holds, for the start-up line and for reports.
struct KvGeometry {
  int num_layers = 0;              // layers with paged attention KV
  std::int64_t elems_per_token = 0;  // K and V elements per token per layer
  int bytes_per_elem = 2;          // 2 for bf16, 1 for fp8_e4m3
  int block_size = 16;
};

struct PoolSize {
  std::int64_t num_blocks = 0;
  std::int64_t tokens = 0;
  double requests_at_max_len = 0;
  std::string describe() const;  // "KV pool: 310,292 tokens in 19,393 blocks of 16, 1.18 requests at max-model-len 262144"
  int max_model_len = 0;
  int block_size = 0;
};

PoolSize size_pool(const KvGeometry& g, std::uint64_t budget_bytes, int max_model_len);

}  // namespace tandem::engine::kv
