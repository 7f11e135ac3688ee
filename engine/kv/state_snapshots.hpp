// Prefix caching for models with a recurrent state (glm5_next's linear attention): which copies
// of a sequence's state, taken at a block boundary of its prompt, are kept, and for which prefix.
//
// A paged attention block can be shared because its rows depend only on the tokens up to it; a
// recurrent state cannot be rebuilt from blocks, so a prefix-cache hit on such a model is usable
// only up to a boundary where a copy of the state was kept. This index holds `capacity` such copies
// (the bytes live with the model: host vectors on the CPU path, device buffers on a GPU), each
// named by the chain hash of its prefix's blocks AND the prefix's tokens, so a hash collision can
// never hand out another prefix's state. Copies that a sequence is about to read or write are
// pinned; the least recently used unpinned one is replaced when a new one is kept.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "block_pool.hpp"

namespace tandem::engine::kv {

class StateSnapshots {
 public:
  explicit StateSnapshots(int capacity);

  int capacity() const { return static_cast<int>(entries_.size()); }
  // Kept copies that a lookup can find.
  int num_kept() const;

  // The kept copy of exactly this prefix (`hash`: BlockPool::chain_hash of its blocks), pinned
  // until unpin(); nullopt when there is none.
  std::optional<int> acquire(std::uint64_t hash, std::span<const Token> prefix);
  bool contains(std::uint64_t hash, std::span<const Token> prefix) const;
  void unpin(int index);

  // A copy to write a new state into: the least recently used unpinned one (its old prefix is
  // forgotten), pinned and not findable until commit(); nullopt when every copy is pinned.
  std::optional<int> reserve();
  // The state was written: `index` now holds this prefix's (an older copy of the same prefix is
  // forgotten). Unpins it.
  void commit(int index, std::uint64_t hash, std::span<const Token> prefix);
  // The write did not happen (the step failed, the sequence left): forgotten and unpinned.
  void abandon(int index);

 private:
  struct Entry {
    bool kept = false;  // commit()ed: findable
    int pins = 0;
    std::uint64_t hash = 0;
    std::vector<Token> prefix;
    std::list<int>::iterator lru_pos;  // valid when pins == 0
  };
  std::optional<int> find(std::uint64_t hash, std::span<const Token> prefix) const;
  void pin(int index);

  std::vector<Entry> entries_;
  std::list<int> lru_;  // unpinned entries; front = least recently used
};

}  // namespace tandem::engine::kv
