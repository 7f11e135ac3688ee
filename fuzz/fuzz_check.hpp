// What a fuzz target does when a property it checks does not hold: print why and abort, so that
// libFuzzer records the input as a crash (a wrong answer is a finding, like a sanitizer report).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tandem::fuzz {

[[noreturn]] inline void fail(std::string_view why) {
  std::fprintf(stderr, "fuzz property failed: %.*s\n", static_cast<int>(why.size()), why.data());
  std::abort();
}

inline void check(bool ok, std::string_view why) {
  if (!ok) fail(why);
}

}  // namespace tandem::fuzz
