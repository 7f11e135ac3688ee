// Fixed-size KV pages ("blocks") with reference counts and a content-addressed prefix cache.
// A block whose last user leaves keeps its cached content until the pool needs the space
// (least recently released first), so a repeated prompt prefix costs nothing to prefill.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tandem::engine::kv {

using BlockId = std::int32_t;
using Token = std::int32_t;

class BlockPool {
 public:
  BlockPool(std::int32_t num_blocks, int block_size);

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks an allocation can take now: never-used or released ones, cached or not.
  std::int32_t num_available() const;

  // A block with reference count 1. Prefers uncached free blocks, then evicts the least
  // recently released cached block. nullopt when every block is in use.
  std::optional<BlockId> allocate();
  void retain(BlockId b);
  void release(BlockId b);
  int ref_count(BlockId b) const { return blocks_[static_cast<size_t>(b)].refs; }

  // Prefix cache. `hash` chains the block's tokens with its predecessor's hash; the tokens are
  // kept as well, so a hash collision can never hand out the wrong content.
  std::optional<BlockId> lookup(std::uint64_t hash, std::span<const Token> tokens);  // retains on hit
  void publish(BlockId b, std::uint64_t hash, std::span<const Token> tokens);
  std::size_t num_cached() const { return by_hash_.size(); }

  static std::uint64_t chain_hash(std::uint64_t parent, std::span<const Token> tokens);

 private:
  struct Block {
    int refs = 0;
    bool cached = false;
    std::uint64_t hash = 0;
    std::vector<Token> tokens;
    std::list<BlockId>::iterator lru_pos;  // valid when refs == 0 and cached
  };
  void forget(BlockId b);

  int block_size_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;       // refs == 0, not cached
  std::list<BlockId> evictable_;    // refs == 0, cached; front = least recently released
  std::unordered_map<std::uint64_t, BlockId> by_hash_;
};

}  // namespace tandem::engine::kv
