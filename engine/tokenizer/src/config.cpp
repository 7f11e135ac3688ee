#include "config.hpp"

#include <nlohmann/json.hpp>

namespace tandem::tokenizer {
namespace {

// A role is null, a token string, or a serialized AddedToken object with "content".
Result<std::optional<int32_t>> role_id(const Tokenizer::Impl& impl, const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<int32_t>{};
  std::string content;
  if (it->is_string()) {
    content = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    content = (*it)["content"].get<std::string>();
  } else {
    return Error{std::string(key) + ": expected null, a token string or {\"content\": \"...\"}"};
  }
  if (const auto a = impl.added_ids.find(content); a != impl.added_ids.end()) return std::optional<int32_t>{a->second};
  if (const auto v = impl.model.vocab().find(content); v != impl.model.vocab().end()) return std::optional<int32_t>{v->second};
  return Error{std::string(key) + ": token \"" + content + "\" is not in the tokenizer's vocabulary"};
}

}  // namespace

Result<bool> apply_tokenizer_config(Tokenizer::Impl& impl, std::string_view config_json, std::string_view origin) {
  const std::string where(origin);
  const nlohmann::json config = nlohmann::json::parse(config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return Error{where + ": not a JSON object"};
  struct Role {
    const char* key;
    std::optional<int32_t>* slot;
  };
  for (const Role role : {Role{"bos_token", &impl.special_ids.bos}, Role{"eos_token", &impl.special_ids.eos},
                          Role{"pad_token", &impl.special_ids.pad}, Role{"unk_token", &impl.special_ids.unk}}) {
    auto id = role_id(impl, config, role.key);
    if (!id) return id.error().with_context(where);
    if (id.value()) *role.slot = id.value();
  }
  return true;
}

}  // namespace tandem::tokenizer
