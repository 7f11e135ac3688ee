// Context rows a device drafter has been handed (DeviceDrafter::add_context) but not yet written to
// its pool: their positions and pool slots, oldest first (the CUDA drafter keeps their features
// beside them on the device). One pass writes them all before the next proposal; stage() lays out
// that pass's inputs. Host bookkeeping only, so it is tested without a GPU (tests/spec).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace tandem::spec {

class WaitingContext {
 public:
  explicit WaitingContext(int capacity = 0) : capacity_(capacity) {}
  int size() const { return static_cast<int>(pos_.size()); }
  bool empty() const { return pos_.empty(); }
  // Whether `more` rows still fit beside the waiting ones.
  bool fits(int more) const { return size() + more <= capacity_; }
  void add(std::span<const std::int32_t> pos, std::span<const std::int32_t> slots);
  // The pass's inputs for `rows` >= size() rows: the waiting rows' positions and slots, except that
  // where rows of several steps name one slot (a rejected draft's position, then the token kept
  // there; a finished sequence's block taken by another) only the latest keeps it, as the steps one
  // after another would have left the pool; the earlier ones and the padding rows up to `rows` write
  // the scratch block (position 0, slot scratch_slot + row % block_size).
  void stage(int rows, std::int32_t scratch_slot, int block_size, std::span<std::int32_t> pos, std::span<std::int32_t> slots) const;
  void clear() { pos_.clear(), slots_.clear(); }

 private:
  int capacity_;
  std::vector<std::int32_t> pos_, slots_;
};

}  // namespace tandem::spec
