// Shaping constrained answers: a tool call's arguments streamed in pieces add up to the whole
// answer's, whatever the split; a required-tool answer's wrapper never leaks into the arguments.
#include <doctest/doctest.h>

#include "structured_output.hpp"

using namespace tandem::engine::api;
using nlohmann::json;

namespace {

struct Collected {
  std::string id, name, arguments, content;
  int headers = 0;
};

Collected stream_in_pieces(const StructuredOutput& out, const std::string& text, std::size_t piece) {
  StructuredStream s(out, "call_x");
  std::vector<nlohmann::ordered_json> deltas;
  for (std::size_t i = 0; i < text.size(); i += piece)
    for (auto& d : s.feed(text.substr(i, piece))) deltas.push_back(d);
  for (auto& d : s.finish()) deltas.push_back(d);
  Collected c;
  for (const auto& d : deltas) {
    if (d.contains("content")) c.content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    const auto& tc = d["tool_calls"][0];
    CHECK(tc["index"] == 0);
    if (tc.contains("id")) {
      ++c.headers;
      c.id = tc["id"];
      c.name = tc["function"]["name"];
    }
    c.arguments += tc["function"]["arguments"].get<std::string>();
  }
  return c;
}

}  // namespace

TEST_CASE("tool_choice named: the text is the arguments, whole or in pieces") {
  const StructuredOutput out{StructuredKind::tool_named, "get_weather"};
  const std::string text = R"({"city": "Z\u00fcrich {x}", "days": 2})";
  const ChatMessage m = assemble_structured(text, out, "call_1");
  REQUIRE(m.calls.size() == 1);
  CHECK(m.calls[0].name == "get_weather");
  CHECK(m.calls[0].arguments == text);
  CHECK(m.calls[0].id == "call_1");
  CHECK(m.content.empty());
  CHECK(structured_finish_reason(text, out, "stop") == "tool_calls");
  for (std::size_t piece : {1u, 3u, 7u, 100u}) {
    const Collected c = stream_in_pieces(out, text, piece);
    CHECK(c.headers == 1);
    CHECK(c.name == "get_weather");
    CHECK(c.id == "call_x");
    CHECK(c.arguments == text);
    CHECK(c.content.empty());
  }
  // Cut short (a stop string, say): not a call, the text comes back as content.
  CHECK(assemble_structured(R"({"city": "Os)", out, "c").content == R"({"city": "Os)");
  CHECK(structured_finish_reason(R"({"city": "Os)", out, "stop") == "stop");
}

TEST_CASE("tool_choice required: name from the wrapper, arguments without it") {
  const StructuredOutput out{StructuredKind::tool_any, ""};
  const std::string args = "{\"q\": \"a}b\xc3\xa9}\", \"n\": {}}";
  const std::string text = R"({"name":"search","arguments":)" + args + "}";
  const ChatMessage m = assemble_structured(text, out, "call_2");
  REQUIRE(m.calls.size() == 1);
  CHECK(m.calls[0].name == "search");
  CHECK(m.calls[0].arguments == args);
  CHECK(structured_finish_reason(text, out, "stop") == "tool_calls");
  for (std::size_t piece : {1u, 2u, 5u, 1000u}) {
    const Collected c = stream_in_pieces(out, text, piece);
    INFO("piece " << piece);
    CHECK(c.headers == 1);
    CHECK(c.name == "search");
    CHECK(c.arguments == args);
    CHECK(c.content.empty());
  }
}

TEST_CASE("json: the content is the document") {
  const StructuredOutput out{StructuredKind::json, ""};
  const std::string text = R"({"a": [1, 2]})";
  CHECK(assemble_structured(text, out, "c").content == text);
  CHECK(structured_finish_reason(text, out, "stop") == "stop");
  const Collected c = stream_in_pieces(out, text, 4);
  CHECK(c.content == text);
  CHECK(c.headers == 0);
}
