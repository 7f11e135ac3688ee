// Seeded random truncations and mutations of every test template: parsing and rendering must end
// in output or an Error value, never a crash, hang or escaping exception.
#include <doctest/doctest.h>

#include <random>

#include "case_loader.hpp"

using namespace tandem::tmpl;
using namespace tandem::tmpl::testing;

namespace {

const char* const kFragments[] = {"{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "(", ")", "[", "]", "{", "}",
                                  "'", "\"", "|", ".", ",", ":", " if ", " else ", " endif ", " for ", " in ",
                                  " endfor ", " not ", " is ", "~", "**", "//", "loop", "ns", "messages", "\\",
                                  "{% endfor %}", "{% if x %}", "{% macro m() %}", "{{ caller() }}", "\n", "é", "\xff"};

std::string mutate(const std::string& src, std::mt19937& rng) {
  std::string s = src;
  int edits = 1 + static_cast<int>(rng() % 2);
  for (int k = 0; k < edits && !s.empty(); ++k) {
    std::size_t at = rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0: s.resize(at); break;                                     // truncate
      case 1: s.erase(at, 1 + rng() % 8); break;                       // delete a run
      case 2: s.insert(at, kFragments[rng() % std::size(kFragments)]); break;  // insert syntax
      default: {                                                       // duplicate a slice
        std::size_t from = rng() % s.size();
        s.insert(at, s.substr(from, 1 + rng() % 40));
      }
    }
  }
  return s;
}

}  // namespace

TEST_CASE("mutated templates never crash") {
  std::mt19937 rng(20261202);
  Options opt;
  opt.max_output_bytes = 1 << 20;
  opt.max_iterations = 100000;
  int parsed = 0, rendered = 0, failed = 0;
  for (const auto& c : cases()) {
    if (c.contains("template_from")) continue;
    std::string src = template_source(c);
    ojson ctx = c.contains("context") ? c["context"] : ojson::object();
    if (c.contains("chat")) {
      const auto& chat = c["chat"];
      ctx = chat["special_tokens"];
      ctx["messages"] = chat["messages"];
      ctx["tools"] = chat["tools"];
      ctx["add_generation_prompt"] = chat["add_generation_prompt"];
    }
    for (int i = 0; i < 60; ++i) {
      std::string m = mutate(src, rng);
      auto t = Template::parse(m, "fuzz", opt);
      if (!t) {
        CHECK_FALSE(t.error().message.empty());
        CHECK(t.error().where.rfind("fuzz", 0) == 0);  // names the template (and a position when known)
        ++failed;
        continue;
      }
      ++parsed;
      auto out = t.value().render(ctx);
      if (out) ++rendered;
      else CHECK_FALSE(out.error().message.empty());
    }
  }
  MESSAGE("parsed " << parsed << ", rendered " << rendered << ", rejected " << failed);
  CHECK(parsed > 0);
  CHECK(failed > 0);
}
