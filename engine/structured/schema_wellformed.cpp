#include "schema_wellformed.hpp"

#include <array>

namespace tandem::engine::structured {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;  // the request body itself is bounded deeper than this
constexpr std::array<const char*, 7> kTypes = {"null", "boolean", "object", "array", "number", "integer", "string"};

std::optional<std::string> check(const json& s, const std::string& where, int depth);

std::optional<std::string> check_type_name(const json& t, const std::string& where) {
  if (t.is_string())
    for (const char* name : kTypes)
      if (t == name) return std::nullopt;
  return where + ": unknown type " + t.dump(-1, ' ', false, json::error_handler_t::replace) +
         " (expected null, boolean, object, array, number, integer or string)";
}

std::optional<std::string> check_each_schema(const json& list, const std::string& where, int depth) {
  if (!list.is_array() || list.empty()) return where + ": must be a non-empty list of schemas";
  for (std::size_t i = 0; i < list.size(); ++i)
    if (auto e = check(list[i], where + "/" + std::to_string(i), depth + 1)) return e;
  return std::nullopt;
}

std::optional<std::string> check_schema_map(const json& map, const std::string& where, int depth) {
  if (!map.is_object()) return where + ": must be an object of name -> schema";
  for (const auto& [name, sub] : map.items())
    if (auto e = check(sub, where + "/" + name, depth + 1)) return e;
  return std::nullopt;
}

std::optional<std::string> check_counts(const json& s, const std::string& where) {
  for (const char* k : {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
    if (s.contains(k) && !(s[k].is_number_unsigned() || (s[k].is_number_integer() && s[k].get<long long>() >= 0)))
      return where + "/" + k + ": must be a non-negative integer";
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
    if (s.contains(k) && !s[k].is_number()) return where + "/" + k + ": must be a number";
  return std::nullopt;
}

std::optional<std::string> check(const json& s, const std::string& where, int depth) {
  if (depth > kMaxDepth) return where + ": the schema nests deeper than " + std::to_string(kMaxDepth) + " levels";
  if (s.is_boolean()) return std::nullopt;
  if (!s.is_object()) return where + ": a schema must be an object or a boolean";
  if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) return where + "/type: an empty list of types allows no value";
      for (const auto& x : t)
        if (auto e = check_type_name(x, where + "/type")) return e;
    } else if (auto e = check_type_name(t, where + "/type")) {
      return e;
    }
  }
  if (s.contains("properties"))
    if (auto e = check_schema_map(s["properties"], where + "/properties", depth)) return e;
  for (const char* k : {"$defs", "definitions", "patternProperties"})
    if (s.contains(k))
      if (auto e = check_schema_map(s[k], where + "/" + k, depth)) return e;
  if (s.contains("required")) {
    const json& r = s["required"];
    if (!r.is_array()) return where + "/required: must be a list of property names";
    for (const auto& x : r)
      if (!x.is_string()) return where + "/required: must be a list of property names";
  }
  if (s.contains("items")) {
    const json& it = s["items"];
    if (it.is_array()) {
      if (auto e = check_each_schema(it, where + "/items", depth)) return e;
    } else if (auto e = check(it, where + "/items", depth + 1)) {
      return e;
    }
  }
  for (const char* k : {"additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"})
    if (s.contains(k))
      if (auto e = check(s[k], where + "/" + k, depth + 1)) return e;
  for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems"})
    if (s.contains(k))
      if (auto e = check_each_schema(s[k], where + "/" + k, depth)) return e;
  if (s.contains("enum") && (!s["enum"].is_array() || s["enum"].empty()))
    return where + "/enum: must be a non-empty list";
  if (s.contains("pattern") && !s["pattern"].is_string()) return where + "/pattern: must be a string";
  return check_counts(s, where);
}

}  // namespace

std::optional<std::string> schema_problem(const json& schema) { return check(schema, "#", 0); }

}  // namespace tandem::engine::structured
