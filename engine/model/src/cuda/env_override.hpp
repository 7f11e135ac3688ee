// Environment switches over a CUDA decoder's options (A/B timings in one binary, fallbacks), read
// strictly: unset or empty leaves the option as it is; anything else must be a value the switch
// takes, or the load is refused with the variable's name and what it expected.
#pragma once
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem::model::cuda {

// An integer in [lo, hi] into `out`.
template <class T>
Status env_int(const char* name, long lo, long hi, T& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return Ok{};
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    return Error{std::string(name) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'"};
  out = static_cast<T>(x);
  return Ok{};
}

// One of two words: `second` sets `out`, `first` clears it.
inline Status env_word(const char* name, std::string_view first, std::string_view second, bool& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return Ok{};
  const std::string_view s(v);
  if (s != first && s != second)
    return Error{std::string(name) + ": expected " + std::string(first) + " or " + std::string(second) + ", got '" + v + "'"};
  out = s == second;
  return Ok{};
}

// One of several words: its index in `words` into `out` (a switch of more than two settings).
inline Status env_choice(const char* name, std::initializer_list<std::string_view> words, int& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return Ok{};
  std::string expected;
  int i = 0;
  for (std::string_view w : words) {
    if (w == v) {
      out = i;
      return Ok{};
    }
    // Appended piecewise: GCC 12 at -O3 flags `"|" + std::string(w)` with a false -Wrestrict.
    if (i++) expected += '|';
    expected.append(w);
  }
  return Error{std::string(name) + ": expected " + expected + ", got '" + v + "'"};
}

}  // namespace tandem::model::cuda
