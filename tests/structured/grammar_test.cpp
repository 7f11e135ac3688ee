// The JSON Schema subset and the byte machine: what each keyword lets through and stops, and that
// min_close is exact (so budget-aware decoding can always close a document in time).
#include <doctest/doctest.h>

#include <random>

#include "grammar.hpp"
#include "json_machine.hpp"
#include "schema_check.hpp"

using namespace tandem::engine::structured;
using nlohmann::json;

namespace {

std::shared_ptr<const Grammar> schema(const json& s) {
  auto g = schema_grammar(s);
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.error().message));
  return *g;
}

// How many leading bytes the machine takes (text.size() when all of them).
std::size_t taken(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  JsonMachine m(g);
  for (std::size_t i = 0; i < text.size(); ++i)
    if (!m.feed(static_cast<unsigned char>(text[i]))) return i;
  return text.size();
}
bool complete(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  JsonMachine m(g);
  return m.feed(text) && m.accepting();
}
// The text is a valid prefix but not yet a document.
bool partial(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  JsonMachine m(g);
  return m.feed(text) && !m.accepting();
}

// min_close is the exact distance to the nearest complete document: 0 exactly when complete, one
// byte never lowers it by more than 1, and shortest_completion reaches a document in that many.
void check_min_close(const std::shared_ptr<const Grammar>& g, std::string_view prefix, const json& s) {
  JsonMachine m(g);
  REQUIRE(m.feed(prefix));
  const int h = m.min_close();
  CHECK((h == 0) == m.accepting());
  for (int c = 0; c < 256; ++c) {
    const auto mark = m.checkpoint();
    if (m.feed(static_cast<unsigned char>(c))) {
      INFO("prefix '" << prefix << "' byte " << c);
      CHECK(m.min_close() >= h - 1);
      m.rollback(mark);
    }
  }
  const std::string rest = m.shortest_completion();
  INFO("prefix '" << prefix << "' completion '" << rest << "'");
  CHECK(static_cast<int>(rest.size()) == h);
  REQUIRE(m.feed(rest));
  CHECK(m.accepting());
  const json doc = json::parse(std::string(prefix) + rest);
  CHECK(tandem::structured_test::violation(doc, s).empty());
}

void check_every_prefix(const json& s, std::string_view doc) {
  auto g = schema(s);
  REQUIRE(complete(g, doc));
  for (std::size_t i = 0; i <= doc.size(); ++i) check_min_close(g, doc.substr(0, i), s);
}

}  // namespace

TEST_CASE("types: each one accepts its values and refuses the others") {
  auto str = schema({{"type", "string"}});
  CHECK(complete(str, R"("hello")"));
  CHECK(complete(str, R"("")"));
  CHECK(taken(str, "1") == 0);
  CHECK(taken(str, " \"a\"") == 0);  // no whitespace before the document

  auto num = schema({{"type", "number"}});
  for (auto ok : {"0", "-0", "12", "-1.5", "3.25e+10", "1E-2", "0.5e7"}) CHECK_MESSAGE(complete(num, ok), ok);
  CHECK(taken(num, "01") == 1);
  CHECK(taken(num, ".5") == 0);
  CHECK(taken(num, "+1") == 0);
  CHECK(partial(num, "1."));
  CHECK(partial(num, "-"));
  CHECK(partial(num, "2e"));
  CHECK(taken(num, "1.2.3") == 3);
  CHECK(complete(num, "123456789012345"));
  CHECK(taken(num, "1234567890123456") == 15);  // 15 integer digits at most
  CHECK(taken(num, "1e123") == 4);               // 2 exponent digits at most

  auto integer = schema({{"type", "integer"}});
  CHECK(complete(integer, "-42"));
  CHECK(taken(integer, "1.0") == 1);
  CHECK(taken(integer, "1e5") == 1);

  auto boolean = schema({{"type", "boolean"}});
  CHECK(complete(boolean, "true"));
  CHECK(complete(boolean, "false"));
  CHECK(taken(boolean, "tru3") == 3);
  CHECK(taken(boolean, "null") == 0);

  auto null = schema({{"type", "null"}});
  CHECK(complete(null, "null"));
  CHECK(taken(null, "nul1") == 3);

  auto either = schema({{"type", {"string", "null"}}});
  CHECK(complete(either, "null"));
  CHECK(complete(either, R"("x")"));
  CHECK(taken(either, "1") == 0);

  auto arr = schema({{"type", "array"}, {"items", {{"type", "integer"}}}});
  CHECK(complete(arr, "[]"));
  CHECK(complete(arr, "[1, 2,3 ]"));
  CHECK(taken(arr, R"([1,"a"])") == 3);
  CHECK(taken(arr, "[1,]") == 3);
  CHECK(taken(arr, "[,") == 1);
}

TEST_CASE("strings: UTF-8 is checked, control characters refused, escapes parsed") {
  auto str = schema({{"type", "string"}});
  CHECK(complete(str, "\"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80\""));  // é 日 😀
  CHECK(taken(str, "\"\xc3") == 2);                 // a character cut short is still a prefix
  CHECK(taken(str, "\"\xc3\"") == 2);               // but a quote cannot finish it
  CHECK(taken(str, "\"\x80") == 1);                 // a lone continuation byte
  CHECK(taken(str, "\"\xc0\xaf") == 1);             // overlong
  CHECK(taken(str, "\"\xed\xa0\x80") == 2);         // an encoded surrogate
  CHECK(taken(str, "\"\xf4\x90") == 2);             // above U+10FFFF
  CHECK(taken(str, "\"a\nb\"") == 2);               // raw newline
  CHECK(complete(str, R"("a\nb\t\"\\\/\u00e9\uFFFF")"));
  CHECK(taken(str, R"("\x")") == 2);
  CHECK(taken(str, R"("\ud800")") == 4);            // \uD800-\uDFFF alone are not characters
  CHECK(taken(str, R"("\u12g4")") == 5);
}

TEST_CASE("objects: properties, required, additionalProperties") {
  const json s = {{"type", "object"},
                  {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                  {"required", {"city"}},
                  {"additionalProperties", false}};
  auto g = schema(s);
  CHECK(complete(g, R"({"city":"Oslo"})"));
  CHECK(complete(g, R"({ "days" : 3 , "city": "Rome" })"));
  CHECK(taken(g, R"({})") == 1);                         // city is required
  CHECK(taken(g, R"({"days":3})") == 9);                 // ... so '}' cannot come yet
  CHECK(taken(g, R"({"c")") == 3);                        // c starts city
  CHECK(taken(g, R"({"x")") == 2);                        // nothing starts with x
  CHECK(taken(g, R"({"cit")") == 5);
  CHECK(taken(g, R"({"cit")") == 5);
  CHECK(taken(g, R"({"city":1})") == 8);                  // city is a string
  CHECK(taken(g, R"({"city":"a","city")") == 13);         // no key twice
  CHECK(taken(g, R"({"city":"a","days":1,)") == 20);      // no key left for a comma
  CHECK(taken(g, R"({"ci\u0074y")") == 4);                // declared keys are written plainly

  // additionalProperties absent: other keys with any values; declared keys keep their schema.
  const json open = {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}}}}};
  auto o = schema(open);
  CHECK(complete(o, R"({"n":1,"other":[1,{"x":null}],"nn":"s"})"));
  CHECK(taken(o, R"({"n":"x"})") == 5);

  const json typed = {{"type", "object"}, {"additionalProperties", {{"type", "boolean"}}}};
  auto t = schema(typed);
  CHECK(complete(t, R"({"a":true,"b":false})"));
  CHECK(taken(t, R"({"a":1})") == 5);

  // Nested.
  const json nested = {{"type", "object"},
                       {"properties", {{"loc", {{"type", "object"},
                                                {"properties", {{"lat", {{"type", "number"}}}, {"lon", {{"type", "number"}}}}},
                                                {"required", {"lat", "lon"}}}}}},
                       {"required", {"loc"}}};
  auto n = schema(nested);
  CHECK(complete(n, R"({"loc":{"lat":1.5,"lon":-2}})"));
  CHECK(taken(n, R"({"loc":{"lat":1}})") == 15);
}

TEST_CASE("enum and const: exactly the listed values") {
  auto color = schema({{"enum", {"red", "green", "blue"}}});
  CHECK(complete(color, R"("green")"));
  CHECK(taken(color, R"("gray")") == 3);  // "gr" may still become "green"
  CHECK(taken(color, R"("red" )") == 5);

  auto nums = schema({{"enum", {1, 12, "1"}}});
  CHECK(complete(nums, "1"));   // complete, and could still become 12
  CHECK(complete(nums, "12"));
  CHECK(taken(nums, "123") == 2);
  CHECK(complete(nums, R"("1")"));

  auto c = schema({{"const", {{"a", {1, 2}}}}});
  CHECK(complete(c, R"({"a":[1,2]})"));
  CHECK(taken(c, R"({"a":[1,3]})") == 8);

  // enum filtered by type; nothing left is an error.
  auto typed = schema({{"type", "string"}, {"enum", {"a", 1}}});
  CHECK(taken(typed, "1") == 0);
  CHECK_FALSE(schema_grammar({{"type", "string"}, {"enum", {1, 2}}}).ok());
  CHECK_FALSE(schema_grammar({{"enum", {1}}, {"const", 2}}).ok());

  // in an object property
  auto unit = schema({{"type", "object"},
                      {"properties", {{"unit", {{"enum", {"celsius", "fahrenheit"}}}}}},
                      {"required", {"unit"}}});
  CHECK(complete(unit, R"({"unit":"celsius"})"));
  CHECK(taken(unit, R"({"unit":"kelvin"})") == 9);
}

TEST_CASE("unsupported keywords are refused by name and place") {
  auto e = schema_grammar({{"type", "string"}, {"minLength", 2}, {"pattern", "^a"}});
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("#: unsupported JSON Schema keyword(s) minLength, pattern") == 0);
  auto nested = schema_grammar({{"type", "object"}, {"properties", {{"age", {{"type", "integer"}, {"minimum", 0}}}}}});
  REQUIRE_FALSE(nested.ok());
  CHECK(nested.error().message.find("#/properties/age: unsupported JSON Schema keyword(s) minimum") == 0);
  CHECK(schema_grammar({{"anyOf", json::array()}}).error().message.find("anyOf") != std::string::npos);
  CHECK(schema_grammar({{"type", "strin"}}).error().message.find("unknown type \"strin\"") != std::string::npos);
  CHECK(schema_grammar({{"type", "array"}, {"items", {{{"type", "string"}}}}}).error().message.find("tuple") != std::string::npos);
  CHECK(schema_grammar({{"required", {"x"}}}).error().message.find("not one of 'properties'") != std::string::npos);
  // Annotations are fine.
  CHECK(schema_grammar({{"type", "string"}, {"description", "d"}, {"title", "t"}, {"default", "x"}}).ok());
  // Tool parameters must describe an object.
  CHECK_FALSE(arguments_grammar({{"type", "string"}}).ok());
  CHECK(arguments_grammar(nullptr).ok());
}

TEST_CASE("json_object: one object, nothing before or after it, nesting bounded") {
  auto g = json_object_grammar();
  CHECK(complete(g, R"({"a":[1,{"b":null}],"c":"d\u0041"})"));
  CHECK(complete(g, "{}"));
  CHECK(taken(g, "[]") == 0);
  CHECK(taken(g, " {}") == 0);
  CHECK(taken(g, "{} ") == 2);
  JsonMachine m(g);
  CHECK(m.feed("{}"));
  CHECK(m.finished());
  // Whitespace runs are capped at 32 bytes: pretty printing fits, idling does not.
  const std::string run(32, ' ');
  CHECK(complete(g, "{" + run + "\"a\"" + run + ":" + run + "[" + run + "1" + run + "," + run + "2" + run + "]" + run + "}"));
  CHECK(taken(g, "{" + run + " }") == 33);
  CHECK(taken(g, "{\"a\": [1," + run + "\n]") == 9 + 32);
  std::string deep = "{\"a\":";
  for (int i = 0; i < 40; ++i) deep += "[";
  const auto got = taken(g, deep);
  CHECK(got < deep.size());
  CHECK(got >= 5 + 29);
}

TEST_CASE("tool-call union: a name from the list, then that tool's arguments") {
  std::vector<ToolSchema> tools = {
      {"get_weather", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}},
      {"get_time", {{"type", "object"}, {"properties", {{"tz", {{"type", "string"}}}}}, {"additionalProperties", false}}}};
  auto g = tool_call_grammar(tools);
  REQUIRE(g.ok());
  CHECK(complete(*g, R"({"name":"get_weather","arguments":{"city":"Oslo"}})"));
  CHECK(complete(*g, R"({"name":"get_time","arguments":{}})"));
  CHECK(taken(*g, R"({"name":"get_date")") == 13);
  CHECK(taken(*g, R"({"name":"get_weather","arguments":{}})") == 35);  // city is required
  CHECK(taken(*g, R"({"name":"get_time","arguments":{"city":"x"}})") == 33);
  CHECK(taken(*g, R"({ "name")") == 1);  // the frame around the name is fixed
  JsonMachine m(*g);
  CHECK(m.min_close() == static_cast<int>(std::string(R"({"name":"get_time","arguments":{}})").size()));
  CHECK_FALSE(tool_call_grammar({{"a", nullptr}, {"a", nullptr}}).ok());
}

TEST_CASE("min_close is exact along documents of every kind") {
  check_every_prefix({{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}},
                                      {"unit", {{"enum", {"c", "f"}}}}}},
                      {"required", {"city", "unit"}}},
                     R"({ "days": 12, "city": "Os\u00e9lo", "extra": [true, null], "unit": "f"})");
  check_every_prefix({{"type", "object"}, {"properties", {{"ab", {{"type", "number"}}}, {"abc", {{"type", "string"}}}}},
                      {"additionalProperties", false}},
                     R"({"ab":-1.5e-3,"abc":"x"})");
  check_every_prefix({{"type", "object"},
                      {"properties", {{"ab", {{"type", "number"}}}}},
                      {"required", {"ab"}}},
                     "{\"a\xc3\xa9\":1,\"ab\":2}");
  check_every_prefix({{"type", "array"}, {"items", {{"type", "object"}, {"properties", {{"k", {{"type", "boolean"}}}}},
                                                    {"required", {"k"}}}}},
                     R"([{"k":true},{"k":false,"z":"\n"}])");
  check_every_prefix({{"enum", {1, 12, "x", {{"a", 1}}}}}, R"({"a":1})");
  check_every_prefix(json::object(), R"({"a":[1,2.5,{"b":"c"}],"d":null})");
}

TEST_CASE("random documents closed within a byte budget parse and satisfy the schema") {
  const std::vector<json> schemas = {
      {{"type", "object"},
       {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}},
                       {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}}},
                       {"unit", {{"enum", {"celsius", "fahrenheit"}}}},
                       {"opts", {{"type", "object"}, {"properties", {{"deep", {{"type", {"boolean", "null"}}}}}},
                                 {"required", {"deep"}}}}}},
       {"required", {"city", "unit", "opts"}},
       {"additionalProperties", false}},
      {{"type", "object"}},
      {{"type", "array"}, {"items", {{"type", "number"}}}},
  };
  std::mt19937 rng(7);
  int documents = 0;
  for (const auto& s : schemas) {
    auto g = schema(s);
    const int floor = JsonMachine(g).min_close();
    for (int trial = 0; trial < 150; ++trial) {
      const int budget = floor + static_cast<int>(rng() % 60);
      JsonMachine m(g);
      std::string text;
      for (int used = 0; used < budget && !m.finished(); ++used) {
        // Any byte that keeps the shortest completion within the bytes left, drawn at random.
        std::vector<int> ok;
        for (int c = 0; c < 256; ++c) {
          const auto mark = m.checkpoint();
          if (m.feed(static_cast<unsigned char>(c)) && m.min_close() <= budget - used - 1) ok.push_back(c);
          m.rollback(mark);
        }
        if (ok.empty()) break;
        const int c = ok[rng() % ok.size()];
        REQUIRE(m.feed(static_cast<unsigned char>(c)));
        m.commit();
        text.push_back(static_cast<char>(c));
        if (m.accepting() && rng() % 4 == 0) break;  // a document that may end (a number) ends sometimes
      }
      INFO("schema " << s.dump() << " budget " << budget << " text " << text);
      REQUIRE(m.accepting());
      CHECK(static_cast<int>(text.size()) <= budget);
      const json doc = json::parse(text);
      CHECK(tandem::structured_test::violation(doc, s).empty());
      ++documents;
    }
  }
  CHECK(documents == 450);
}

// Found by fuzz/schema_grammar_fuzz.cpp (fuzz/corpus/schema_grammar/crash-deep-object-no-room):
// an object opened at the machine's last frame took a key and then had no room for its value,
// while min_close still promised a 1-byte scalar there.
TEST_CASE("nesting to the frame limit never reaches a state its shortest completion cannot close") {
  const auto g = schema_grammar(json::parse(
      R"({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "object"}}})"));
  REQUIRE(g);
  JsonMachine m(g.value());
  std::string fed;
  const std::string text = "{\"k\":[{\"a\":" + std::string(40, '[') + " {\"type\":";
  for (char c : text) {
    if (!m.feed(static_cast<unsigned char>(c))) continue;  // refused bytes are skipped, as the mask does
    m.commit();
    fed += c;
  }
  const std::string rest = m.shortest_completion();
  CAPTURE(fed);
  CHECK(static_cast<int>(rest.size()) == m.min_close());
  JsonMachine done(m);
  CHECK(done.feed(rest));
  CHECK(done.accepting());
  CHECK_FALSE(json::parse(fed + rest, nullptr, false).is_discarded());
}
