// Response assembly with canned model text (no model needed): stop strings, glm45 reasoning and
// glm47 tool calls, whole and streamed in every split, and the OpenAI JSON/SSE shapes they become.
#include <doctest/doctest.h>

#include <string>

#include "chat_output.hpp"
#include "openai_response.hpp"
#include "stop_strings.hpp"

using namespace tandem::engine::api;
using nlohmann::json;

namespace {

const json kTools = json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
  "properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}])");

std::function<std::string()> ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

OutputOptions all_parsers() {
  OutputOptions o;
  o.reasoning = true;
  o.tool_calls = true;
  o.tools = kTools;
  return o;
}

// Streams `text` in pieces of `step` bytes and gathers what comes out.
ChatMessage stream(const std::string& text, const OutputOptions& o, std::size_t step) {
  ChatStream s(o, ids());
  ChatMessage all;
  auto add = [&](const ChatMessage& m) {
    all.content += m.content;
    all.reasoning += m.reasoning;
    for (const auto& c : m.calls) all.calls.push_back(c);
  };
  for (std::size_t i = 0; i < text.size(); i += step) add(s.feed(text.substr(i, step)));
  add(s.finish());
  return all;
}

}  // namespace

TEST_CASE("stop strings: cut at the first, held back across pieces, nothing after") {
  StopMatcher m({"END", "##"});
  CHECK(m.feed("hello E") == "hello ");  // "E" may start END
  CHECK(m.feed("N") == "");
  CHECK(m.feed("Xtra #") == "ENXtra ");
  CHECK(m.feed("# more") == "");
  CHECK(m.stopped());
  CHECK(m.feed("late") == "");
  CHECK(m.finish() == "");

  StopMatcher held({"STOP"});
  CHECK(held.feed("abc ST") == "abc ");
  CHECK(held.finish() == "ST");  // never became a stop string
  CHECK_FALSE(held.stopped());

  StopMatcher none({});
  CHECK(none.feed("anything") == "anything");
}

TEST_CASE("whole output: reasoning, content and typed tool-call arguments") {
  const std::string text =
      "<think>The user wants weather.</think>Let me check."
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>42</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>";
  auto m = assemble_chat(text, all_parsers(), ids());
  CHECK(m.reasoning == "The user wants weather.");
  CHECK(m.content == "Let me check.");
  REQUIRE(m.calls.size() == 1);
  CHECK(m.calls[0].name == "get_weather");
  CHECK(json::parse(m.calls[0].arguments) == json{{"city", "42"}, {"days", 3}});  // city is a string by schema
  CHECK(chat_finish_reason("stop", !m.calls.empty()) == "tool_calls");

  auto msg = chat_message_json(m);
  CHECK(msg["role"] == "assistant");
  CHECK(msg["reasoning_content"] == "The user wants weather.");
  CHECK(msg["tool_calls"][0]["type"] == "function");
  CHECK(msg["tool_calls"][0]["id"] == "call_0");
  CHECK(msg["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK_FALSE(msg["tool_calls"][0].contains("index"));  // only stream deltas carry an index
}

TEST_CASE("parsers off: the text is the content, tags and all") {
  const std::string text = "<think>x</think>y<tool_call>f</tool_call>";
  auto m = assemble_chat(text, OutputOptions{}, ids());
  CHECK(m.content == text);
  CHECK(m.reasoning.empty());
  CHECK(m.calls.empty());
  auto msg = chat_message_json(m);
  CHECK_FALSE(msg.contains("reasoning_content"));
  CHECK_FALSE(msg.contains("tool_calls"));
  CHECK(chat_finish_reason("length", false) == "length");
}

TEST_CASE("only a tool call: content is null, as OpenAI sends it") {
  auto m = assemble_chat("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
                         all_parsers(), ids());
  REQUIRE(m.calls.size() == 1);
  CHECK(chat_message_json(m)["content"].is_null());
}

TEST_CASE("streaming equals whole output for every piece size (tags split across pieces)") {
  const std::string text =
      "<think>plan: call twice</think>Sure."
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>days</arg_key>"
      "<arg_value>2</arg_value></tool_call> done";
  const auto whole = assemble_chat(text, all_parsers(), ids());
  REQUIRE(whole.calls.size() == 2);
  for (std::size_t step = 1; step <= text.size(); step += (step < 12 ? 1 : 7)) {
    CAPTURE(step);
    auto s = stream(text, all_parsers(), step);
    CHECK(s.reasoning == whole.reasoning);
    CHECK(s.content == whole.content);
    REQUIRE(s.calls.size() == 2);
    for (int i = 0; i < 2; ++i) {
      CHECK(s.calls[static_cast<std::size_t>(i)].name == whole.calls[static_cast<std::size_t>(i)].name);
      CHECK(s.calls[static_cast<std::size_t>(i)].arguments == whole.calls[static_cast<std::size_t>(i)].arguments);
    }
  }
}

TEST_CASE("stream deltas: reasoning, content, numbered tool calls; chunks in OpenAI's shape") {
  ChatStream s(all_parsers(), ids());
  int next_index = 0;
  std::vector<nlohmann::ordered_json> deltas;
  for (const char* piece : {"<thi", "nk>hmm</th", "ink>ok", "<tool_call>get_weather<arg_key>city</arg_key>",
                            "<arg_value>Oslo</arg_value></tool_call>"}) {
    for (auto& d : chat_deltas(s.feed(piece), next_index)) deltas.push_back(d);
  }
  for (auto& d : chat_deltas(s.finish(), next_index)) deltas.push_back(d);
  REQUIRE(deltas.size() >= 3);
  std::string reasoning, content;
  int calls = 0;
  for (const auto& d : deltas) {
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      CHECK(d["tool_calls"][0]["index"] == calls);
      CHECK(d["tool_calls"][0]["function"]["arguments"] == R"({"city":"Oslo"})");
      ++calls;
    }
  }
  CHECK(reasoning == "hmm");
  CHECK(content == "ok");
  CHECK(calls == 1);
  CHECK(s.saw_tool_calls());

  const ResponseMeta meta{"chatcmpl-1", 7, "m"};
  auto chunk = chat_chunk(meta, deltas.back(), std::nullopt);
  CHECK(chunk["object"] == "chat.completion.chunk");
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  CHECK(chat_chunk(meta, nlohmann::ordered_json::object(), "tool_calls")["choices"][0]["finish_reason"] == "tool_calls");
  auto usage = chat_usage_chunk(meta, {5, 3});
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["total_tokens"] == 8);
  CHECK(sse(chunk).rfind("data: {", 0) == 0);
  CHECK(sse(chunk).substr(sse(chunk).size() - 2) == "\n\n");
  CHECK(sse_done() == "data: [DONE]\n\n");
}

TEST_CASE("an unclosed tool call at the end comes back as content, streamed or whole") {
  const std::string text = "ok <tool_call>get_weather<arg_key>city";
  auto whole = assemble_chat(text, all_parsers(), ids());
  CHECK(whole.calls.empty());
  CHECK(whole.content == text);
  CHECK(stream(text, all_parsers(), 3).content == text);
}

TEST_CASE("completion bodies") {
  const ResponseMeta meta{"cmpl-1", 7, "m"};
  auto r = completion_response(meta, "hi", "length", {2, 1});
  CHECK(r["object"] == "text_completion");
  CHECK(r["choices"][0]["text"] == "hi");
  CHECK(r["usage"]["total_tokens"] == 3);
  CHECK(completion_chunk(meta, "x")["choices"][0]["finish_reason"].is_null());
  // Invalid UTF-8 never throws on the way out.
  CHECK_NOTHROW(dump(completion_chunk(meta, std::string("\xff\xfe"))));
}
