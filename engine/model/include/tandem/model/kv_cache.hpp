// Where the model keeps each layer's per-token attention state ("rows": GQA keys and values; MLA
// compressed latent + rotated shared key). The model reads and writes rows only through
// KvSequence, so the same forward runs against either store:
//   KvCache          one contiguous buffer per layer, owned by one sequence (tests, greedy_generate)
//   PagedKvSequence  a sequence's view of a shared paged pool through its block table (paged_kv.hpp)
// Attention reads rows through KvRows, a block-table address: contiguous storage is the special
// case of a single block that never ends.
// Models with recurrent layers (glm5_next's linear attention) also keep a fixed-size state per
// sequence (state_floats floats, whatever the length): it is not paged with the rows, and it
// cannot be truncated, only snapshot and restored (KvCache::snapshot / restore).
#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "tandem/kernels/dtype.hpp"
#include "tandem/model/result.hpp"

namespace tandem::model {

// What a model caches per token: row_width floats in each of n_layers layers.
struct KvLayout {
  int n_layers = 0;
  int row_width = 0;
  long state_floats = 0;  // per-sequence recurrent state (0: attention only)
  bool operator==(const KvLayout&) const = default;
};

// Rows of one layer of one sequence: row j lives at
//   base + (block_table[j / block_size] * block_size + j % block_size) * row_width.
struct KvRows {
  float* base = nullptr;
  const std::int32_t* block_table = nullptr;
  int block_size = 0;
  int row_width = 0;
  // What the rows stand for: fp32 (the default) or the rows of a bf16 / fp8_e4m3 device pool, whose
  // values a model that honours it rounds its new rows to (kernels::round_to; fp8 as x / scale).
  // glm5_next's DSA layers do: the CPU reference of its CUDA model's pool types.
  kernels::DType element = kernels::DType::f32;
  float scale = 1.f;
  float* row(int j) const {
    const long slot = static_cast<long>(block_table[j / block_size]) * block_size + j % block_size;
    return base + slot * row_width;
  }
};

class KvSequence {
 public:
  virtual ~KvSequence() = default;
  virtual KvLayout layout() const = 0;
  // Tokens with a row (including those append() just made room for).
  virtual int length() const = 0;
  // Position of each of the length() tokens; attention masks by position.
  virtual std::span<const int> positions() const = 0;
  virtual KvRows rows(int layer) = 0;
  // The sequence's recurrent state, layout().state_floats floats, zero for a new sequence; the
  // model advances it in place over the tokens of each forward call. Empty for stores without one.
  virtual std::span<float> recurrent_state() { return {}; }
  float* row(int layer, int token) { return rows(layer).row(token); }
  // Makes room for new tokens at the end (the model then fills their rows layer by layer);
  // an error, and nothing changed, when the store cannot hold them.
  virtual Status append(std::span<const int> positions) = 0;
};

// The simple per-sequence store of the CPU reference path: for every layer one contiguous row per
// cached token, plus the token's position (any positions, in any order).
class KvCache final : public KvSequence {
 public:
  KvCache(int n_layers, int row_width, long state_floats = 0)
      : rows_(static_cast<size_t>(n_layers)), width_(row_width), state_(static_cast<size_t>(state_floats), 0.f) {}

  KvLayout layout() const override { return {n_layers(), width_, static_cast<long>(state_.size())}; }
  std::span<float> recurrent_state() override { return state_; }
  int length() const override { return static_cast<int>(positions_.size()); }
  int n_layers() const { return static_cast<int>(rows_.size()); }
  int row_width() const { return width_; }
  std::span<const int> positions() const override { return positions_; }

  KvRows rows(int layer) override {
    // One block as large as any sequence can be: j / block_size is always 0.
    const float scale = static_cast<size_t>(layer) < scales_.size() ? scales_[static_cast<size_t>(layer)] : 1.f;
    return {rows_[static_cast<size_t>(layer)].data(), &kSingleBlock, std::numeric_limits<int>::max(), width_, element_, scale};
  }
  // Rows that stand for a device pool of `element` (KvRows::element), an fp8 one at each layer's
  // scale (none given: 1): a check's CPU reference of that pool.
  void emulate_rows(kernels::DType element, std::vector<float> scales = {}) { element_ = element, scales_ = std::move(scales); }
  using KvSequence::row;
  const float* row(int layer, int token) const {
    return rows_[static_cast<size_t>(layer)].data() + static_cast<long>(token) * width_;
  }

  Status append(std::span<const int> positions) override {
    positions_.insert(positions_.end(), positions.begin(), positions.end());
    for (auto& r : rows_) r.resize(positions_.size() * static_cast<size_t>(width_));
    return Ok{};
  }
  // Forgets every token from index n on (e.g. draft tokens a verifier rejected). The recurrent
  // state cannot forget: a model that has one rolls back with snapshot() / restore() instead.
  void truncate(int n) {
    if (n >= length()) return;
    positions_.resize(static_cast<size_t>(n < 0 ? 0 : n));
    for (auto& r : rows_) r.resize(positions_.size() * static_cast<size_t>(width_));
  }

  // Speculative rollback: snapshot() before feeding draft tokens, restore() to forget them; the
  // cache is then bit for bit what it was (rows past the snapshot dropped, state copied back).
  struct Snapshot {
    int length = 0;
    std::vector<float> state;
  };
  Snapshot snapshot() const { return {length(), state_}; }
  void restore(const Snapshot& s) {
    truncate(s.length);
    state_ = s.state;
  }

 private:
  static constexpr std::int32_t kSingleBlock = 0;
  std::vector<std::vector<float>> rows_;
  std::vector<int> positions_;
  int width_;
  std::vector<float> state_;
  kernels::DType element_ = kernels::DType::f32;
  std::vector<float> scales_;
};

}  // namespace tandem::model
