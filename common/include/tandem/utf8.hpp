// UTF-8 for the whole project, with Unicode's "maximal subpart" rule for what is not valid: the one
// rule shared by the tokenizer (which must survive invalid input), one-shot and streaming decode,
// and the chat templates (Python strings index, slice and measure by code point), so no two
// places can read the same bytes differently.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::utf8 {

enum class StepKind { Valid, Invalid, Truncated };

struct Step {
  StepKind kind;
  std::size_t length;   // bytes consumed: a whole character, or the maximal invalid subpart
  char32_t code_point;  // meaningful for Valid only
};

// Reads the sequence starting at `pos` (< s.size()): no overlong forms, no surrogates, nothing
// above U+10FFFF. Truncated: a valid prefix cut off by the end of `s`.
Step step(std::string_view s, std::size_t pos);

// Invalid and truncated subparts become U+FFFD each, as Rust's from_utf8_lossy does.
std::string to_valid_lossy(std::string_view s);

// Length of a valid-but-incomplete sequence at the very end (0..3): what streaming holds back.
std::size_t truncated_tail(std::string_view s);

void append(std::string& out, char32_t cp);

// Code points, each invalid or truncated subpart one U+FFFD (the rule of to_valid_lossy).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);

// Code points in `s` (bytes that are not continuation bytes: exact for valid UTF-8).
std::size_t length(std::string_view s);
bool is_ascii(std::string_view s);

// Offset of the first character that is not valid (invalid or truncated), or npos when all is.
std::size_t invalid_at(std::string_view s);

// The last character boundary at or before byte `n` (s.size() when n is past the end), so that a
// text cut there for a message or a report stays valid UTF-8.
std::size_t boundary_before(std::string_view s, std::size_t n);

// `s` itself when it has at most `n` bytes, else its first <= n bytes cut at a character boundary
// and "..." after them: how a message or a report quotes text of any length.
std::string clip(std::string_view s, std::size_t n);

}  // namespace tandem::utf8
