// UTF-8 helpers: Python strings index, slice and measure by code point, so templates that slice or
// take the length of non-ASCII text need code points, not bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::tmpl::detail {

std::u32string utf8_decode(std::string_view s);   // invalid bytes decode as U+FFFD
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
std::size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);

}  // namespace tandem::tmpl::detail
