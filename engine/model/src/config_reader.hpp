// Reads fields of one JSON object and remembers which ones it has read, so that the caller can
// refuse whatever is left over. The first problem found is kept as the error.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/model/result.hpp"

namespace tandem::model::detail {

class FieldReader {
 public:
  FieldReader(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  // Reads a field; absent (or null where allowed) gives the default, absent without a default fails.
  int integer(const std::string& key, std::optional<int> fallback = std::nullopt);
  std::optional<int> optional_integer(const std::string& key);  // null or absent -> nullopt
  double number(const std::string& key, std::optional<double> fallback = std::nullopt);
  bool boolean(const std::string& key, std::optional<bool> fallback = std::nullopt);
  std::string string(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  std::vector<int> integer_list(const std::string& key);  // int or [int...]; absent or null -> {}
  const nlohmann::json* raw(const std::string& key);      // marks the field read; null when absent
  void accept(const std::string& key) { seen_.insert(key); }

  void fail(const std::string& message);
  // Refuses every field not read or accepted; call last.
  void refuse_unread();
  bool ok() const { return !error_; }
  const Error& error() const { return *error_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* lookup(const std::string& key, bool required);
  const nlohmann::json& obj_;
  std::string where_;
  std::set<std::string> seen_;
  std::optional<Error> error_;
};

}  // namespace tandem::model::detail
