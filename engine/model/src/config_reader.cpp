#include "config_reader.hpp"

#include <cmath>
#include <limits>

namespace tandem::model::detail {

void FieldReader::fail(const std::string& message) {
  if (!error_) error_ = Error{where_ + ": " + message};
}

const nlohmann::json* FieldReader::lookup(const std::string& key, bool required) {
  seen_.insert(key);
  if (!obj_.contains(key) || obj_.at(key).is_null()) {
    if (required) fail("missing field '" + key + "'");
    return nullptr;
  }
  return &obj_.at(key);
}

const nlohmann::json* FieldReader::raw(const std::string& key) {
  seen_.insert(key);
  return obj_.contains(key) ? &obj_.at(key) : nullptr;
}

static bool as_int(const nlohmann::json& v, int& out) {
  if (v.is_number_integer()) {
    const auto x = v.get<long long>();
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) return false;
    out = static_cast<int>(x);
    return true;
  }
  if (v.is_number_float()) {  // 2.0 written by a float-happy tool is still 2
    const double d = v.get<double>();
    if (d != std::floor(d) || std::fabs(d) > 1e9) return false;
    out = static_cast<int>(d);
    return true;
  }
  return false;
}

int FieldReader::integer(const std::string& key, std::optional<int> fallback) {
  const auto* v = lookup(key, !fallback);
  if (!v) return fallback.value_or(0);
  int out = 0;
  if (!as_int(*v, out)) fail("field '" + key + "' must be an integer, got " + v->dump());
  return out;
}

std::optional<int> FieldReader::optional_integer(const std::string& key) {
  const auto* v = lookup(key, false);
  if (!v) return std::nullopt;
  int out = 0;
  if (!as_int(*v, out)) {
    fail("field '" + key + "' must be an integer or null, got " + v->dump());
    return std::nullopt;
  }
  return out;
}

double FieldReader::number(const std::string& key, std::optional<double> fallback) {
  const auto* v = lookup(key, !fallback);
  if (!v) return fallback.value_or(0.0);
  if (!v->is_number()) {
    fail("field '" + key + "' must be a number, got " + v->dump());
    return 0.0;
  }
  return v->get<double>();
}

bool FieldReader::boolean(const std::string& key, std::optional<bool> fallback) {
  const auto* v = lookup(key, !fallback);
  if (!v) return fallback.value_or(false);
  if (!v->is_boolean()) {
    fail("field '" + key + "' must be true or false, got " + v->dump());
    return false;
  }
  return v->get<bool>();
}

std::string FieldReader::string(const std::string& key, std::optional<std::string> fallback) {
  const auto* v = lookup(key, !fallback);
  if (!v) return fallback.value_or("");
  if (!v->is_string()) {
    fail("field '" + key + "' must be a string, got " + v->dump());
    return "";
  }
  return v->get<std::string>();
}

std::vector<int> FieldReader::integer_list(const std::string& key) {
  const auto* v = lookup(key, false);
  std::vector<int> out;
  if (!v) return out;
  int x = 0;
  if (as_int(*v, x)) return {x};
  if (!v->is_array()) {
    fail("field '" + key + "' must be an integer or a list of integers, got " + v->dump());
    return out;
  }
  for (const auto& e : *v) {
    if (!as_int(e, x)) {
      fail("field '" + key + "' must be an integer or a list of integers, got " + v->dump());
      return {};
    }
    out.push_back(x);
  }
  return out;
}

void FieldReader::refuse_unread() {
  for (const auto& [key, value] : obj_.items()) {
    if (seen_.count(key)) continue;
    fail("unknown field '" + key + "' (" + value.dump() +
         "): tandem does not implement it and cannot tell whether it changes the model's math, so it "
         "refuses the model rather than ignore it");
  }
}

}  // namespace tandem::model::detail
