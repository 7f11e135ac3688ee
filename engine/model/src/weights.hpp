// Reads named tensors out of a checkpoint as fp32, checking shapes; keeps the first error so that
// loading code can read like the list of tensors it needs.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tandem/model/safetensors.hpp"

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
