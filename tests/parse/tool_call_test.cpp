#include <doctest/doctest.h>

#include "tool_call_glm47.hpp"

using namespace tandem::engine::parse;
using nlohmann::json;

namespace {
json weather_tools() {
  return json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"},"days":{"type":"integer"},"zip":{"type":"string"},"units":{"type":"object"}}}}}])");
}
std::function<std::string()> counter() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}
}  // namespace

TEST_CASE("glm47 block: name, typed arguments, content outside") {
  ToolCallParserGlm47 p(weather_tools(), counter());
  auto r = p.parse(
      "Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>zip</arg_key><arg_value>75001</arg_value>"
      "<arg_key>units</arg_key><arg_value>{\"t\": \"C\"}</arg_value></tool_call>");
  CHECK(r.content == "Let me check.");
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].id == "call_0");
  CHECK(r.calls[0].name == "get_weather");
  // zip stays a string (schema says string) though it parses as a number; days becomes 3.
  CHECK(r.calls[0].arguments == R"({"city":"Paris","days":3,"zip":"75001","units":{"t":"C"}})");
}

TEST_CASE("GLM-4.5 layout with newlines, and two calls") {
  ToolCallParserGlm47 p(weather_tools(), counter());
  auto r = p.parse(
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>\n"
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>");
  CHECK(r.content.empty());
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[1].arguments == R"({"city":"Rome"})");
  CHECK(r.calls[1].id == "call_1");
}

TEST_CASE("unknown tool: values that parse as JSON are JSON, others strings; no arguments is {}") {
  ToolCallParserGlm47 p(json::array(), counter());
  auto r = p.parse("<tool_call>f<arg_key>a</arg_key><arg_value>[1,2]</arg_value><arg_key>b</arg_key>"
                   "<arg_value>hello</arg_value></tool_call><tool_call>g</tool_call>");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].arguments == R"({"a":[1,2],"b":"hello"})");
  CHECK(r.calls[1].name == "g");
  CHECK(r.calls[1].arguments == "{}");
}

TEST_CASE("malformed or cut-off blocks come back as content, never as a half call") {
  ToolCallParserGlm47 p(json::array(), counter());
  auto cut = p.parse("ok <tool_call>f<arg_key>a</arg_key><arg_val");
  CHECK(cut.calls.empty());
  CHECK(cut.content == "ok <tool_call>f<arg_key>a</arg_key><arg_val");
  auto no_name = p.parse("<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>");
  CHECK(no_name.calls.empty());
}

TEST_CASE("streaming: same calls and content at every split point") {
  const std::string text =
      "Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Lima</arg_value>"
      "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ToolCallParserGlm47 p(weather_tools(), counter());
    std::string content;
    std::vector<ToolCall> calls;
    for (auto piece : {text.substr(0, cut), text.substr(cut)}) {
      auto d = p.feed(piece);
      content += d.content;
      calls.insert(calls.end(), d.calls.begin(), d.calls.end());
    }
    auto end = p.finish();
    content += end.content;
    INFO("cut at " << cut);
    CHECK(content == "Checking.");
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].arguments == R"({"city":"Lima","days":2})");
  }
}

TEST_CASE("streaming: an unclosed block at the end is returned as content") {
  ToolCallParserGlm47 p(json::array(), counter());
  auto a = p.feed("x <tool_call>f<arg_key>");
  CHECK(a.content == "x ");
  auto end = p.finish();
  CHECK(end.content == "<tool_call>f<arg_key>");
  CHECK(end.calls.empty());
}

// Found by fuzz/tool_call_glm47_fuzz.cpp (fuzz/corpus/tool_call_glm47/crash-parameters-string):
// the request's tools are only checked for a function name, and value() threw type_error.306 or
// .302 out of the parser (on the engine's thread) when a schema part had another type.
TEST_CASE("tools whose schema parts have other types type nothing, and never throw") {
  for (const char* tools : {R"([{"function":{"name":"f","parameters":"x"}}])",
                            R"([{"function":{"name":"f","parameters":{"properties":[1]}}}])",
                            R"([{"function":{"name":"f","parameters":{"properties":{"a":{"type":["string","null"]}}}}}])",
                            R"([{"function":{"name":7}}, "f", [], {"function":"f"}])"}) {
    CAPTURE(tools);
    ToolCallParserGlm47 p(json::parse(tools), counter());
    ToolParse r;
    REQUIRE_NOTHROW(r = p.parse("<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"));
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments == R"({"a":1})");
  }
}
