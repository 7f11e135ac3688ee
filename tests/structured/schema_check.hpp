// An independent check that a parsed JSON value satisfies a schema of the subset tandem supports
// (type, properties, required, additionalProperties, items, enum, const): what the tests hold the
// constrained output to. Written apart from engine/structured on purpose.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::structured_test {

inline bool has_type(const nlohmann::json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())));
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

// Empty when `v` satisfies `s`, else why not (with a JSON pointer-ish path).
inline std::string violation(const nlohmann::json& v, const nlohmann::json& s, const std::string& at = "$") {
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": schema false";
  if (s.contains("const") && v != s["const"]) return at + ": not the const " + s["const"].dump();
  if (s.contains("enum")) {
    bool found = false;
    for (const auto& e : s["enum"]) found = found || e == v;
    if (!found) return at + ": " + v.dump() + " is not in the enum";
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array())
      for (const auto& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
    else
      ok = has_type(v, s["type"].get<std::string>());
    if (!ok) return at + ": " + v.dump() + " is not of type " + s["type"].dump();
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return at + ": required " + r.dump() + " is missing";
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        auto why = violation(x, s["properties"][k], at + "." + k);
        if (!why.empty()) return why;
      } else if (s.contains("additionalProperties")) {
        auto why = violation(x, s["additionalProperties"], at + "." + k);
        if (!why.empty()) return why;
      }
    }
  }
  if (v.is_array() && s.contains("items"))
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto why = violation(v[i], s["items"], at + "[" + std::to_string(i) + "]");
      if (!why.empty()) return why;
    }
  return "";
}

}  // namespace tandem::structured_test
