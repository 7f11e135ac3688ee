#include "tandem/spec/waiting_context.hpp"

#include <unordered_map>

namespace tandem::spec {

void WaitingContext::add(std::span<const std::int32_t> pos, std::span<const std::int32_t> slots) {
  pos_.insert(pos_.end(), pos.begin(), pos.end());
  slots_.insert(slots_.end(), slots.begin(), slots.end());
}

void WaitingContext::stage(int rows, std::int32_t scratch_slot, int block_size, std::span<std::int32_t> pos,
                           std::span<std::int32_t> slots) const {
  // The rows of one pass run at once: two naming one slot would race, and the older would win
  // half the time.
  std::unordered_map<std::int32_t, int> latest;
  for (int t = 0; t < size(); ++t) latest[slots_[static_cast<std::size_t>(t)]] = t;
  for (int t = 0; t < rows; ++t) {
    const auto i = static_cast<std::size_t>(t);
    const bool real = t < size() && latest.at(slots_[i]) == t;
    pos[i] = real ? pos_[i] : 0;
    slots[i] = real ? slots_[i] : scratch_slot + t % block_size;
  }
}

}  // namespace tandem::spec
