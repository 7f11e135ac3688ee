// Reads named tensors out of a checkpoint as fp32, checking shapes; keeps the first error so that
// loading code can read like the list of tensors it needs. get_rows / get_cols keep the slice a
// tensor-parallel rank holds (shard.hpp).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tandem/model/safetensors.hpp"
#include "tandem/model/shard.hpp"

namespace tandem::model::detail {

class WeightReader {
 public:
  explicit WeightReader(const Checkpoint& ck) : ck_(ck) {}

  std::vector<float> get(const std::string& name, const std::vector<int64_t>& shape) {
    if (error_) return {};
    auto t = ck_.read(name, shape);
    if (!t) {
      error_ = t.error();
      return {};
    }
    return std::move(t).value();
  }
  // Rows [r.begin, r.end) of the first dimension (for a 3-D tensor: whole [*, ...] slabs).
  std::vector<float> get_rows(const std::string& name, const std::vector<int64_t>& shape, Range r) {
    auto t = get(name, shape);
    if (!ok() || shape.empty()) return t;
    const size_t row = t.size() / static_cast<size_t>(shape[0]);
    return std::vector<float>(t.begin() + static_cast<long>(row * static_cast<size_t>(r.begin)),
                              t.begin() + static_cast<long>(row * static_cast<size_t>(r.end)));
  }
  // Columns [c.begin, c.end) of a 2-D tensor [rows, cols].
  std::vector<float> get_cols(const std::string& name, const std::vector<int64_t>& shape, Range c) {
    auto t = get(name, shape);
    if (!ok() || shape.size() != 2) return t;
    std::vector<float> out(static_cast<size_t>(shape[0]) * static_cast<size_t>(c.size()));
    for (int64_t i = 0; i < shape[0]; ++i)
      std::copy(t.begin() + i * shape[1] + c.begin, t.begin() + i * shape[1] + c.end, out.begin() + i * c.size());
    return out;
  }
  bool has(const std::string& name) const { return ck_.has(name); }
  void fail(std::string message) {
    if (!error_) error_ = Error{std::move(message)};
  }
  bool ok() const { return !error_; }
  const Error& error() const { return *error_; }

 private:
  const Checkpoint& ck_;
  std::optional<Error> error_;
};

}  // namespace tandem::model::detail
