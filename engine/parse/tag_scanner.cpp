#include "tag_scanner.hpp"

#include <algorithm>

namespace tandem::engine::parse {

std::size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const std::size_t max = std::min(text.size(), tag.size() - 1);
  for (std::size_t n = max; n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace tandem::engine::parse
