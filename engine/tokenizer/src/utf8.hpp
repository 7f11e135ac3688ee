// UTF-8 scanning with Unicode's "maximal subpart" rule: the one rule shared by the encoder (which
// must survive invalid input), one-shot decode and the streaming decoder, so they cannot disagree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tokenizer::utf8 {

enum class StepKind { Valid, Invalid, Truncated };

struct Step {
  StepKind kind;
  std::size_t length;  // bytes consumed: a whole character, or the maximal invalid subpart
  char32_t code_point; // meaningful for Valid only
};

// Reads the sequence starting at `pos` (< s.size()). Truncated: a valid prefix cut off by the end.
Step step(std::string_view s, std::size_t pos);

// Invalid and truncated subparts become U+FFFD each, as Rust's from_utf8_lossy does.
std::string to_valid_lossy(std::string_view s);

// Length of a valid-but-incomplete sequence at the very end (0..3): what streaming holds back.
std::size_t truncated_tail(std::string_view s);

void append(std::string& out, char32_t cp);

}  // namespace tandem::tokenizer::utf8
