// Every case in cases/cases.json renders byte-identically to its golden.
#include <doctest/doctest.h>

#include "case_loader.hpp"

using namespace tandem::tmpl::testing;

TEST_CASE("template goldens are byte-identical") {
  int checked = 0;
  for (const auto& c : cases()) {
    if (c.contains("template_from")) continue;  // real-template cases: test_template_qwen3
    std::string name = c["name"].get<std::string>();
    CAPTURE(name);
    REQUIRE_MESSAGE(goldens().contains(name), "no golden for " << name << "; run reference/render_goldens.mjs");
    std::string got = render_case(c);
    std::string want = goldens()[name].get<std::string>();
    CHECK_MESSAGE(got == want, "case " << name << "\n--- got ---\n" << got << "\n--- want ---\n" << want);
    ++checked;
  }
  CHECK(checked >= 40);
}
