// Hash map from token string to id that can be probed with a string_view (no temporary strings
// on the hot encode path).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tandem::tokenizer {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace tandem::tokenizer
