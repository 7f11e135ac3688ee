// The CUDA decoders' strict environment switches (cuda/env_override.hpp): unset or empty leaves the
// option; a known word sets it; anything else is refused with the variable and the words it takes.
#include <doctest/doctest.h>

#include <cstdlib>

#include "cuda/env_override.hpp"

using namespace tandem::model::cuda;

namespace {
constexpr const char* kVar = "TANDEM_ENV_OVERRIDE_TEST";
}

TEST_CASE("env_choice: unset or empty keeps the option, a word sets its index, others are refused") {
  int out = 7;
  unsetenv(kVar);
  CHECK(env_choice(kVar, {"flash", "mla", "generic"}, out));
  CHECK(out == 7);
  setenv(kVar, "", 1);
  CHECK(env_choice(kVar, {"flash", "mla", "generic"}, out));
  CHECK(out == 7);
  const char* words[] = {"flash", "mla", "generic"};
  for (int i = 0; i < 3; ++i) {
    setenv(kVar, words[i], 1);
    CHECK(env_choice(kVar, {"flash", "mla", "generic"}, out));
    CHECK(out == i);
  }
  setenv(kVar, "Flash", 1);
  const auto e = env_choice(kVar, {"flash", "mla", "generic"}, out);
  REQUIRE_FALSE(e);
  CHECK(e.error().message == "TANDEM_ENV_OVERRIDE_TEST: expected flash|mla|generic, got 'Flash'");
  CHECK(out == 2);  // a refused value leaves the option as it was
  unsetenv(kVar);
}

TEST_CASE("env_word and env_int keep their contracts") {
  bool on = false;
  setenv(kVar, "dequant", 1);
  CHECK(env_word(kVar, "fused", "dequant", on));
  CHECK(on);
  setenv(kVar, "fused", 1);
  CHECK(env_word(kVar, "fused", "dequant", on));
  CHECK_FALSE(on);
  setenv(kVar, "maybe", 1);
  CHECK_FALSE(env_word(kVar, "fused", "dequant", on));
  int n = 3;
  setenv(kVar, "12", 1);
  CHECK(env_int(kVar, 0, 16, n));
  CHECK(n == 12);
  setenv(kVar, "17", 1);
  CHECK_FALSE(env_int(kVar, 0, 16, n));
  CHECK(n == 12);
  unsetenv(kVar);
}
