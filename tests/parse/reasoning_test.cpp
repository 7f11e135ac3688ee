#include <doctest/doctest.h>

#include "reasoning_glm45.hpp"

using namespace tandem::engine::parse;

TEST_CASE("whole output: reasoning before </think>, content after") {
  auto r = split_reasoning_glm45("<think>Two and two.</think>The answer is 4.");
  CHECK(r.reasoning == "Two and two.");
  CHECK(r.content == "The answer is 4.");
  auto no_open = split_reasoning_glm45("thinking already open</think>4");
  CHECK(no_open.reasoning == "thinking already open");
  CHECK(no_open.content == "4");
}

TEST_CASE("whole output cut off before </think> comes back as content") {
  auto r = split_reasoning_glm45("<think>I was still thinking when max_tokens hit");
  CHECK(r.reasoning.empty());
  CHECK(r.content == "<think>I was still thinking when max_tokens hit");
  CHECK(split_reasoning_glm45("plain answer").content == "plain answer");
}

TEST_CASE("streaming gives the same split for every chunk boundary, tags split included") {
  const std::string text = "<think>step one, step two</think>final: 42";
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 3) {
      ReasoningStreamGlm45 s;
      std::string reasoning, content;
      for (auto piece : {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)}) {
        auto d = s.feed(piece);
        reasoning += d.reasoning;
        content += d.content;
        CHECK(d.content.find('<') == std::string::npos);  // no tag fragment ever leaks
      }
      auto end = s.finish();
      reasoning += end.reasoning;
      content += end.content;
      INFO("cuts " << cut1 << ", " << cut2);
      CHECK(reasoning == "step one, step two");
      CHECK(content == "final: 42");
    }
  }
}

TEST_CASE("streaming: a '<' that is not a tag is released once it cannot be one") {
  ReasoningStreamGlm45 s;
  auto a = s.feed("if a <");
  CHECK(a.content == "if a ");
  auto b = s.feed(" b then");
  CHECK(b.content == "< b then");
}
