#include "post_processor.hpp"

#include <nlohmann/json.hpp>

namespace tandem::tokenizer {
namespace {

Result<std::vector<int32_t>> ids_of_array(const nlohmann::json& arr, const std::string& where) {
  if (!arr.is_array()) return Error{where + ": expected an array of ids"};
  std::vector<int32_t> ids;
  for (const auto& v : arr) {
    if (!v.is_number_integer()) return Error{where + ": expected integer ids"};
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// TemplateProcessing's "single" template: SpecialToken items around one Sequence item.
Result<PostProcessor> from_template(const nlohmann::json& spec, const std::string& where) {
  const auto single = spec.find("single");
  if (single == spec.end() || !single->is_array()) return Error{where + ".single: expected an array"};
  const auto specials = spec.find("special_tokens");
  PostProcessor pp;
  bool seen_sequence = false;
  std::size_t i = 0;
  for (const auto& item : *single) {
    const std::string at = where + ".single[" + std::to_string(i++) + "]";
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string()) {
      return Error{at + ": expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": \"...\"}}"};
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (specials == spec.end() || !specials->contains(name) || !(*specials)[name].contains("ids")) {
      return Error{at + ": special token \"" + name + "\" has no entry with \"ids\" in " + where + ".special_tokens"};
    }
    auto ids = ids_of_array((*specials)[name]["ids"], where + ".special_tokens[\"" + name + "\"].ids");
    if (!ids) return ids.error();
    auto& dest = seen_sequence ? pp.suffix : pp.prefix;
    dest.insert(dest.end(), ids->begin(), ids->end());
  }
  return pp;
}

// Bert and Roberta spell their tokens as ["<s>", 0].
Result<int32_t> pair_id(const nlohmann::json& spec, const char* key, const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return Error{where + "." + key + ": expected [\"token\", id]"};
  }
  return static_cast<int32_t>((*it)[1].get<int64_t>());
}

}  // namespace

Result<PostProcessor> PostProcessor::from_json(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return PostProcessor{};
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return Error{where + ": expected an object with a string \"type\""};
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return PostProcessor{};
  if (type == "TemplateProcessing") return from_template(spec, where);
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto cls = pair_id(spec, "cls", where);
    if (!cls) return cls.error();
    auto sep = pair_id(spec, "sep", where);
    if (!sep) return sep.error();
    return PostProcessor{{cls.value()}, {sep.value()}};
  }
  if (type == "Sequence") {
    if (!spec.contains("processors") || !spec["processors"].is_array()) {
      return Error{where + ".processors: expected an array"};
    }
    // Each processor wraps what the previous ones produced.
    PostProcessor all;
    std::size_t i = 0;
    for (const auto& inner : spec["processors"]) {
      auto pp = from_json(inner, where + ".processors[" + std::to_string(i++) + "]");
      if (!pp) return pp.error();
      all.prefix.insert(all.prefix.begin(), pp->prefix.begin(), pp->prefix.end());
      all.suffix.insert(all.suffix.end(), pp->suffix.begin(), pp->suffix.end());
    }
    return all;
  }
  return Error{where + ": post_processor type \"" + type +
               "\" is not supported (supported: ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing, Sequence)"};
}

}  // namespace tandem::tokenizer
