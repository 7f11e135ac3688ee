#include "block_pool.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem::engine::kv {

BlockPool::BlockPool(std::int32_t num_blocks, int block_size) : block_size_(block_size) {
  // Invariant, not input: Engine::start validates block_size (pool_plan) and sizes num_blocks first.
  if (num_blocks < 0 || block_size <= 0) throw std::invalid_argument("BlockPool: bad geometry");
  blocks_.resize(static_cast<size_t>(num_blocks));
  free_.reserve(static_cast<size_t>(num_blocks));
  // Hand out low ids first (pop_back), which keeps traces readable.
  for (std::int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::int32_t BlockPool::num_available() const {
  return static_cast<std::int32_t>(free_.size() + evictable_.size());
}

std::optional<BlockId> BlockPool::allocate() {
  BlockId b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    b = evictable_.front();
    evictable_.pop_front();
    forget(b);
  } else {
    return std::nullopt;
  }
  blocks_[static_cast<size_t>(b)].refs = 1;
  return b;
}

void BlockPool::retain(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.refs == 0 && blk.cached) evictable_.erase(blk.lru_pos);
  ++blk.refs;
}

void BlockPool::release(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  // Invariant: only KvManager releases, once per block it holds; a double release is a bug here.
  if (blk.refs <= 0) throw std::logic_error("BlockPool: release of a free block " + std::to_string(b));
  if (--blk.refs > 0) return;
  if (blk.cached) {
    blk.lru_pos = evictable_.insert(evictable_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void BlockPool::forget(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (!blk.cached) return;
  auto it = by_hash_.find(blk.hash);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  blk.cached = false;
  blk.tokens.clear();
}

std::optional<BlockId> BlockPool::lookup(std::uint64_t hash, std::span<const Token> tokens) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const Block& blk = blocks_[static_cast<size_t>(it->second)];
  if (!std::equal(blk.tokens.begin(), blk.tokens.end(), tokens.begin(), tokens.end())) return std::nullopt;
  retain(it->second);
  return it->second;
}

void BlockPool::publish(BlockId b, std::uint64_t hash, std::span<const Token> tokens) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.cached || by_hash_.count(hash)) return;  // same content already cached: keep the first
  blk.cached = true;
  blk.hash = hash;
  blk.tokens.assign(tokens.begin(), tokens.end());
  by_hash_[hash] = b;
}

std::uint64_t BlockPool::chain_hash(std::uint64_t parent, std::span<const Token> tokens) {
  // FNV-1a over the parent hash and the token values.
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffU;
      h *= 1099511628211ULL;
    }
  };
  mix(parent);
  for (Token t : tokens) mix(static_cast<std::uint32_t>(t));
  return h;
}

}  // namespace tandem::engine::kv
