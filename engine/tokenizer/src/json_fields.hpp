// Optional typed fields of tokenizer.json objects. nlohmann's value(key, fallback) throws when the
// key holds another type ("special": 1, "type": 7); these return an error naming the key instead,
// so no malformed file can throw out of Tokenizer::from_json.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "tandem/result.hpp"

namespace tandem::tokenizer {

inline Result<bool> bool_field(const nlohmann::json& obj, const char* key, bool fallback, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Error{where + "." + key + ": expected true or false"};
  return it->get<bool>();
}

inline Result<std::string> string_field(const nlohmann::json& obj, const char* key, std::string fallback,
                                        const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) return Error{where + "." + key + ": expected a string"};
  return it->get<std::string>();
}

}  // namespace tandem::tokenizer
