// "did you mean": the closest of a set of names by edit distance, for unknown commands.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::cli {

// Levenshtein distance (insert, delete, substitute: 1 each).
std::size_t edit_distance(std::string_view a, std::string_view b);
// The nearest candidate, when it is near enough to be a typo: at most 2 edits, and fewer than
// half the word (so "x" does not suggest "rollback").
std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace tandem::cli
