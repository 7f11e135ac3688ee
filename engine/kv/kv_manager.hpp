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
  KvManager(std::int32_t num_blocks, int block_size, bool prefix_cache, std::int32_t state_slots = 0);

  int block_size() const { return pool_.block_size(); }
  std::int32_t free_blocks() const { return pool_.num_available(); }
  std::int32_t total_blocks() const { return pool_.num_blocks(); }
  const BlockPool& pool() const { return pool_; }

  // Admit a sequence. With the prefix cache on (and not bypassed), whole blocks of `prompt`
  // already in the pool are shared; returns how many prompt tokens need no prefill. At least the
  // last prompt token is always recomputed, since its logits are needed.
  // nullopt when a state slot is needed and none is free (nothing changed).
  std::optional<int> admit(SeqId id, std::span<const Token> prompt, bool use_prefix_cache);

  // Blocks needed to hold `n` more tokens of KV beyond what is written.
  std::int32_t blocks_needed(SeqId id, int n) const;
  // Make room for `n` more tokens; false (and nothing changed) if the pool is short.
  bool reserve(SeqId id, int n);
  // KV for tokens[0, new_len) is now valid (after a forward, after verification). Full blocks
  // are published to the prefix cache. `tokens` is the sequence's full token list.
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
  };
  BlockPool pool_;
  StateSlots states_;
  bool prefix_cache_;
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
