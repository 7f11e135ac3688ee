// The shape of the YAML text, checked on yaml-cpp's event stream before any node is built: one
// document, bounded nesting, no explicit tags, and syntax errors placed where the mistake is.
#pragma once
#include <string>

#include "tandem/diagnostics.hpp"

namespace tandem::yaml {

// A manifest needs about six levels; 64 leaves room for chat-template kwargs and stays far below
// where a recursive parser runs out of stack.
inline constexpr int kMaxDepth = 64;

// Empty when `text` is exactly one YAML document, nested at most kMaxDepth collections deep, with
// no explicit tag (`!foo`, `!!str`) and no syntax error. Otherwise every tag found, or the first
// structural problem (a second document, too deep, a syntax error), at its line and column.
Diagnostics check_structure(const std::string& text, const std::string& file);

}  // namespace tandem::yaml
