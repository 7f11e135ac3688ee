#include "tandem/model/paged_kv.hpp"

#include <new>
#include <numeric>
#include <string>

namespace tandem::model {

PagedKvPool::PagedKvPool(KvLayout layout, std::int32_t num_blocks, int block_size)
    : layout_(layout), num_blocks_(num_blocks), block_size_(block_size) {}

Result<std::unique_ptr<PagedKvPool>> PagedKvPool::create(KvLayout layout, std::int32_t num_blocks, int block_size) {
  if (layout.n_layers <= 0 || layout.row_width <= 0) return error("KV pool: the model caches nothing per token");
  if (num_blocks <= 0 || block_size <= 0)
    return error("KV pool: " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                 " tokens is not a pool");
  std::unique_ptr<PagedKvPool> p(new PagedKvPool(layout, num_blocks, block_size));
  const size_t per_layer = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size) * static_cast<size_t>(layout.row_width);
  try {
    // Zeroed, so every page is touched now: the pool is committed at start (a machine without the
    // memory fails here, not mid-serving), decode steps take no first-touch page faults, and the
    // process's RSS is flat from the first request on (deploy/soak.sh checks it) instead of
    // creeping up for minutes as the prefix cache reaches pages it has not used yet.
    for (int l = 0; l < layout.n_layers; ++l) p->layers_.push_back(std::make_unique<float[]>(per_layer));
  } catch (const std::bad_alloc&) {
    return error("KV pool: cannot allocate " + std::to_string(p->bytes() >> 20) + " MiB for " + std::to_string(num_blocks) +
                 " blocks; lower `kv_cache_memory` or `gpu_memory_utilization`");
  }
  return p;
}

std::uint64_t PagedKvPool::bytes() const {
  return static_cast<std::uint64_t>(layout_.n_layers) * static_cast<std::uint64_t>(num_blocks_) *
         static_cast<std::uint64_t>(block_size_) * static_cast<std::uint64_t>(layout_.row_width) * sizeof(float);
}

PagedKvSequence::PagedKvSequence(PagedKvPool& pool, std::span<const std::int32_t> block_table, int written,
                                 std::span<float> state)
    : pool_(pool), state_(state), table_(block_table), positions_(static_cast<size_t>(written < 0 ? 0 : written)) {
  std::iota(positions_.begin(), positions_.end(), 0);
}

Status PagedKvSequence::append(std::span<const int> positions) {
  const int n = static_cast<int>(positions.size()), have = length();
  for (int i = 0; i < n; ++i)
    if (positions[static_cast<size_t>(i)] != have + i)
      return error("paged KV: token " + std::to_string(have + i) + " comes at position " +
                   std::to_string(positions[static_cast<size_t>(i)]) + "; paged sequences hold positions 0, 1, 2, ... in order");
  const long need_blocks = (static_cast<long>(have) + n + pool_.block_size() - 1) / pool_.block_size();
  if (need_blocks > static_cast<long>(table_.size()))
    return error("paged KV: " + std::to_string(have + n) + " tokens need " + std::to_string(need_blocks) +
                 " blocks but the block table has " + std::to_string(table_.size()) + " (reserve first)");
  for (long b = 0; b < need_blocks; ++b) {
    const auto id = table_[static_cast<size_t>(b)];
    if (id < 0 || id >= pool_.num_blocks())
      return error("paged KV: block id " + std::to_string(id) + " is outside the pool of " + std::to_string(pool_.num_blocks()));
  }
  positions_.insert(positions_.end(), positions.begin(), positions.end());
  return Ok{};
}

}  // namespace tandem::model
