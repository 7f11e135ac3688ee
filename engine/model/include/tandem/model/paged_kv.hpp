// The serving engine's KV store: per layer one pool tensor [num_blocks, block_size, row_width]
// (fp32 here, the CPU reference type), shared by every sequence. Which blocks a sequence owns,
// shares through the prefix cache, or gives back is the KV manager's business (engine/kv); the
// model only sees a sequence's block table, through PagedKvSequence.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tandem/model/kv_cache.hpp"
#include "tandem/model/result.hpp"

namespace tandem::model {

class PagedKvPool {
 public:
  // Fails (rather than throwing) on a bad geometry or when the memory cannot be had.
  static Result<std::unique_ptr<PagedKvPool>> create(KvLayout layout, std::int32_t num_blocks, int block_size);

  KvLayout layout() const { return layout_; }
  std::int32_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  float* layer(int l) { return layers_[static_cast<size_t>(l)].get(); }
  // Bytes actually held (fp32 rows), which is what this CPU pool costs.
  std::uint64_t bytes() const;

 private:
  PagedKvPool(KvLayout layout, std::int32_t num_blocks, int block_size);
  KvLayout layout_;
  std::int32_t num_blocks_;
  int block_size_;
  // Left uninitialised: a row is always written before attention reads it, and untouched pages
  // of a large pool then cost no memory.
  std::vector<std::unique_ptr<float[]>> layers_;
};

// One sequence's view of the pool for one forward call. Tokens [0, written) already have rows;
// the block table (usually KvManager::block_table) must cover every token the call appends and
// must outlive the view. Positions are the token indices (0, 1, 2, ...), as the engine assigns
// them; append() refuses anything else. A model with recurrent layers also gets the sequence's
// fixed-size state (layout().state_floats floats), which lives outside the paged pool: it is not
// paged, so no page size has to fit both it and the attention rows.
class PagedKvSequence final : public KvSequence {
 public:
  PagedKvSequence(PagedKvPool& pool, std::span<const std::int32_t> block_table, int written,
                  std::span<float> state = {});

  KvLayout layout() const override { return pool_.layout(); }
  int length() const override { return static_cast<int>(positions_.size()); }
  std::span<const int> positions() const override { return positions_; }
  KvRows rows(int layer) override {
    return {pool_.layer(layer), table_.data(), pool_.block_size(), pool_.layout().row_width};
  }
  Status append(std::span<const int> positions) override;
  std::span<float> recurrent_state() override { return state_; }

 private:
  PagedKvPool& pool_;
  std::span<float> state_;
  std::span<const std::int32_t> table_;
  std::vector<int> positions_;
};

}  // namespace tandem::model
