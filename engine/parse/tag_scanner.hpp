// Finding tags like "</think>" in streamed text, where a tag may be split across chunks.
// Text that could still be the start of a tag is held back until the next chunk decides.
#pragma once
#include <string>
#include <string_view>

namespace tandem::engine::parse {

// Length of the longest suffix of `text` that is a proper prefix of `tag` (0 if none).
std::size_t partial_tag_suffix(std::string_view text, std::string_view tag);

}  // namespace tandem::engine::parse
