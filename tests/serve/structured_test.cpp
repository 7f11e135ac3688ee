// Structured output end to end: the real tandem-serve on the demo model (random weights, so the
// model itself would never write JSON) must still answer tool_choice named / required and
// response_format json_object / json_schema with documents that parse and satisfy the schema,
// within max_tokens, whole and streamed.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "schema_check.hpp"
#include "serve_harness.hpp"

using namespace tandem::serve_test;
using tandem::structured_test::violation;
using nlohmann::json;

namespace {

Server& shared() {
  static std::unique_ptr<Server> s;
  if (!s)
    s = std::make_unique<Server>(std::vector<std::string>{"--served-model-name", "tiny-glm", "--max-model-len", "1024",
                                                          "--max-num-seqs", "4", "--kv-cache-memory", "8MiB",
                                                          "--enable-auto-tool-choice", "--tool-call-parser", "glm47",
                                                          "--reasoning-parser", "glm45"});
  return *s;
}

const json kWeatherParams = {{"type", "object"},
                             {"properties", {{"city", {{"type", "string"}, {"description", "City name"}}},
                                             {"unit", {{"enum", {"celsius", "fahrenheit"}}}},
                                             {"days", {{"type", "integer"}}},
                                             {"hourly", {{"type", "boolean"}}}}},
                             {"required", {"city", "unit"}},
                             {"additionalProperties", false}};
const json kTimeParams = {{"type", "object"},
                          {"properties", {{"tz", {{"type", "string"}}}}},
                          {"required", {"tz"}}};

json tools() {
  return {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"description", "Weather"}, {"parameters", kWeatherParams}}}},
          {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", kTimeParams}}}}};
}

json chat(int max_tokens, std::uint64_t seed) {
  return {{"model", "tiny-glm"},
          {"messages", {{{"role", "user"}, {"content", "What is the weather in Oslo?"}}}},
          {"max_tokens", max_tokens},
          {"temperature", 1.0},
          {"seed", seed}};
}

json post(const json& body) {
  auto r = post_json(shared().port(), "/v1/chat/completions", body);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  return r.json();
}

struct StreamedCall {
  std::string id, name, arguments, content, finish_reason;
  int header_deltas = 0;
};

// Reads a streamed answer: tool-call deltas (first with id, type and name, then arguments
// pieces), content deltas and the one finish_reason.
StreamedCall read_stream(const json& body) {
  auto r = post_json(shared().port(), "/v1/chat/completions", body);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  auto events = sse_events(r.body);
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  StreamedCall s;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    CHECK(c["object"] == "chat.completion.chunk");
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    const json& d = ch["delta"];
    if (d.contains("content") && d["content"].is_string()) s.content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      const json& tc = d["tool_calls"][0];
      CHECK(tc["index"] == 0);
      if (tc.contains("id")) {
        ++s.header_deltas;
        s.id = tc["id"].get<std::string>();
        CHECK(tc["type"] == "function");
        s.name = tc["function"]["name"].get<std::string>();
      }
      s.arguments += tc["function"]["arguments"].get<std::string>();
    }
    if (!ch["finish_reason"].is_null()) {
      CHECK(s.finish_reason.empty());
      s.finish_reason = ch["finish_reason"].get<std::string>();
    }
  }
  return s;
}

}  // namespace

TEST_CASE("tool_choice named: the arguments parse and satisfy the tool's schema, within max_tokens") {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    for (int max_tokens : {40, 90}) {
      json b = chat(max_tokens, seed);
      b["tools"] = tools();
      b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
      const json j = post(b);
      const json& choice = j["choices"][0];
      INFO(j.dump());
      CHECK(choice["finish_reason"] == "tool_calls");
      CHECK(choice["message"]["content"].is_null());
      REQUIRE(choice["message"]["tool_calls"].size() == 1);
      const json& call = choice["message"]["tool_calls"][0];
      CHECK(call["type"] == "function");
      CHECK(call["id"].get<std::string>().rfind("call_", 0) == 0);
      CHECK(call["function"]["name"] == "get_weather");
      const json args = json::parse(call["function"]["arguments"].get<std::string>());
      CHECK(violation(args, kWeatherParams).empty());
      CHECK(j["usage"]["completion_tokens"].get<int>() <= max_tokens);
    }
  }
}

TEST_CASE("tool_choice named, streamed: one header delta, then argument pieces that add up to the same call") {
  json b = chat(60, 9);
  b["tools"] = tools();
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  const json whole = post(b);
  b["stream"] = true;
  const StreamedCall s = read_stream(b);
  CHECK(s.header_deltas == 1);
  CHECK(s.name == "get_time");
  CHECK(s.finish_reason == "tool_calls");
  CHECK(s.content.empty());
  CHECK(violation(json::parse(s.arguments), kTimeParams).empty());
  // Same seed, same tokens: the streamed arguments are the whole answer's.
  CHECK(s.arguments == whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
}

TEST_CASE("tool_choice required: one of the tools, with arguments for that tool; streamed too") {
  std::set<std::string> names;
  for (std::uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    json b = chat(80, seed);
    b["tools"] = tools();
    b["tool_choice"] = "required";
    const json j = post(b);
    INFO(j.dump());
    CHECK(j["choices"][0]["finish_reason"] == "tool_calls");
    const json& call = j["choices"][0]["message"]["tool_calls"][0];
    const std::string name = call["function"]["name"].get<std::string>();
    names.insert(name);
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    CHECK(violation(args, name == "get_weather" ? kWeatherParams : kTimeParams).empty());
    CHECK((name == "get_weather" || name == "get_time"));

    b["stream"] = true;
    const StreamedCall s = read_stream(b);
    CHECK(s.finish_reason == "tool_calls");
    CHECK(s.name == name);
    CHECK(s.arguments == call["function"]["arguments"].get<std::string>());
  }
  CHECK(!names.empty());
}

TEST_CASE("response_format json_object and json_schema: the content is the document") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    json b = chat(50, seed);
    b["response_format"] = {{"type", "json_object"}};
    const json j = post(b);
    INFO(j.dump());
    CHECK(j["choices"][0]["finish_reason"] == "stop");
    CHECK(json::parse(j["choices"][0]["message"]["content"].get<std::string>()).is_object());

    const json schema = {{"type", "object"},
                         {"properties", {{"answer", {{"type", "string"}}},
                                         {"confidence", {{"type", "number"}}},
                                         {"sources", {{"type", "array"}, {"items", {{"type", "string"}}}}}}},
                         {"required", {"answer", "confidence"}}};
    json s = chat(70, seed);
    s["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "reply"}, {"schema", schema}, {"strict", true}}}};
    const json k = post(s);
    INFO(k.dump());
    CHECK(k["choices"][0]["finish_reason"] == "stop");
    const json doc = json::parse(k["choices"][0]["message"]["content"].get<std::string>());
    CHECK(violation(doc, schema).empty());
    CHECK(k["usage"]["completion_tokens"].get<int>() <= 70);

    s["stream"] = true;
    const StreamedCall st = read_stream(s);
    CHECK(st.finish_reason == "stop");
    CHECK(st.content == k["choices"][0]["message"]["content"].get<std::string>());
  }
}

TEST_CASE("a complete document ends the answer at once (finish_reason stop, tokens left unused)") {
  json b = chat(200, 4);
  b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "yn"}, {"schema", {{"enum", {"yes", "no"}}}}}}};
  const json j = post(b);
  const std::string content = j["choices"][0]["message"]["content"].get<std::string>();
  CHECK((content == "\"yes\"" || content == "\"no\""));
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["usage"]["completion_tokens"].get<int>() <= 5);
}

TEST_CASE("refusals: max_tokens too small, unsupported keywords, unknown tool, missing schema") {
  const auto port = shared().port();
  json b = chat(10, 1);
  b["tools"] = tools();
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  auto small = post_json(port, "/v1/chat/completions", b);
  CHECK(small.status == 400);
  CHECK(small.json()["error"]["param"] == "max_tokens");
  CHECK(small.json()["error"]["message"].get<std::string>().find(R"({"city":"","unit":"celsius"})") != std::string::npos);
  b["max_tokens"] = 28;  // exactly the shortest: still answered, and complete
  auto tight = post_json(port, "/v1/chat/completions", b);
  REQUIRE_MESSAGE(tight.status == 200, tight.body);
  CHECK(tight.json()["choices"][0]["finish_reason"] == "tool_calls");

  json s = chat(50, 1);
  s["response_format"] = {{"type", "json_schema"},
                          {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}, {"properties", {{"age", {{"type", "integer"}, {"minimum", 0}}}}}}}}}};
  auto kw = post_json(port, "/v1/chat/completions", s);
  CHECK(kw.status == 400);
  CHECK(kw.json()["error"]["param"] == "response_format.json_schema.schema");
  CHECK(kw.json()["error"]["message"].get<std::string>().find("#/properties/age: unsupported JSON Schema keyword(s) minimum") !=
        std::string::npos);

  json t = chat(50, 1);
  t["tools"] = tools();
  t["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_stock"}}}};
  auto unknown = post_json(port, "/v1/chat/completions", t);
  CHECK(unknown.status == 400);
  CHECK(unknown.json()["error"]["message"].get<std::string>().find("get_stock") != std::string::npos);

  json bad_tool = chat(50, 1);
  bad_tool["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"patternProperties", json::object()}}}}}}};
  bad_tool["tool_choice"] = "required";
  auto bt = post_json(port, "/v1/chat/completions", bad_tool);
  CHECK(bt.status == 400);
  CHECK(bt.json()["error"]["param"] == "tools[0].function.parameters");

  json no_schema = chat(50, 1);
  no_schema["response_format"] = {{"type", "json_schema"}};
  CHECK(post_json(port, "/v1/chat/completions", no_schema).status == 400);
  CHECK(request(port, "GET", "/health").status == 200);
}

TEST_CASE("12 concurrent constrained streams on --max-num-seqs 4: every answer is a valid document") {
  std::atomic<int> valid{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] {
      json b = chat(60 + i, static_cast<std::uint64_t>(100 + i));
      b["stream"] = true;
      if (i % 2 == 0) {
        b["tools"] = tools();
        b["tool_choice"] = "required";
      } else {
        b["response_format"] = {{"type", "json_object"}};
      }
      auto r = post_json(shared().port(), "/v1/chat/completions", b);
      if (r.status != 200) {
        std::lock_guard lk(mu);
        failures.push_back("request " + std::to_string(i) + ": " + r.body);
        return;
      }
      std::string content, arguments, finish;
      for (const auto& e : sse_events(r.body)) {
        if (e == "[DONE]") continue;
        const json c = json::parse(e);
        if (c["choices"].empty()) continue;
        const json& d = c["choices"][0]["delta"];
        if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
        if (d.contains("tool_calls")) arguments += d["tool_calls"][0]["function"]["arguments"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"].get<std::string>();
      }
      const bool ok = i % 2 == 0 ? finish == "tool_calls" && json::accept(arguments) && json::parse(arguments).is_object()
                                 : finish == "stop" && json::accept(content) && json::parse(content).is_object();
      if (ok) {
        ++valid;
      } else {
        std::lock_guard lk(mu);
        failures.push_back("request " + std::to_string(i) + ": " + r.body);
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK_MESSAGE(valid == 12, (failures.empty() ? std::string() : failures.front()));
}
