// The simple per-sequence KV cache of the CPU reference path: for every layer, one contiguous row
// per cached token holding what the architecture keeps for that token (GQA: its keys and values;
// MLA: its compressed latent and rotated shared key), plus the token's position. The paged,
// shared pool of the serving engine replaces this later; the model API stays the same.
#pragma once
#include <span>
#include <vector>

namespace tandem::model {

class KvCache {
 public:
  KvCache(int n_layers, int row_width) : rows_(static_cast<size_t>(n_layers)), width_(row_width) {}

  int length() const { return static_cast<int>(positions_.size()); }
  int n_layers() const { return static_cast<int>(rows_.size()); }
  int row_width() const { return width_; }
  const std::vector<int>& positions() const { return positions_; }

  float* row(int layer, int token) { return rows_[static_cast<size_t>(layer)].data() + static_cast<long>(token) * width_; }
  const float* row(int layer, int token) const {
    return rows_[static_cast<size_t>(layer)].data() + static_cast<long>(token) * width_;
  }

  // Makes room for new tokens at the end (the model then fills their rows layer by layer).
  void append(std::span<const int> positions) {
    positions_.insert(positions_.end(), positions.begin(), positions.end());
    for (auto& r : rows_) r.resize(positions_.size() * static_cast<size_t>(width_));
  }
  // Forgets every token from index n on (e.g. draft tokens a verifier rejected).
  void truncate(int n) {
    if (n >= length()) return;
    positions_.resize(static_cast<size_t>(n < 0 ? 0 : n));
    for (auto& r : rows_) r.resize(positions_.size() * static_cast<size_t>(width_));
  }

 private:
  std::vector<std::vector<float>> rows_;
  std::vector<int> positions_;
  int width_;
};

}  // namespace tandem::model
