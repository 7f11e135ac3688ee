// The token mask on the demo tokenizer (engine/serve/assets/demo_tokenizer, what --write-demo-model
// ships): the trie walk keeps exactly the tokens a one-by-one check keeps, and random logits
// driven through mask/advance always give a document that parses, satisfies the schema and ends
// within max_tokens.
#include <doctest/doctest.h>

#include <random>

#include "constraint_util.hpp"

using namespace tandem::engine::structured;
using namespace tandem::structured_test;
using nlohmann::json;

namespace {

const tandem::tokenizer::Tokenizer& demo_tokenizer() {
  static const tandem::tokenizer::Tokenizer tok = [] {
    auto t = tandem::tokenizer::Tokenizer::load(std::string(TANDEM_SOURCE_DIR) + "/engine/serve/assets/demo_tokenizer/tokenizer.json");
    REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().message));
    return std::move(t.value());
  }();
  return tok;
}

std::shared_ptr<const TokenVocabulary> demo_vocab() {
  static const auto v = [] {
    auto built = TokenVocabulary::build(demo_tokenizer());
    REQUIRE_MESSAGE(built.ok(), (built.ok() ? "" : built.error().message));
    return *built;
  }();
  return v;
}

const json kWeather = {{"type", "object"},
                       {"properties", {{"city", {{"type", "string"}}},
                                       {"days", {{"type", "integer"}}},
                                       {"unit", {{"enum", {"celsius", "fahrenheit"}}}},
                                       {"hourly", {{"type", "boolean"}}}}},
                       {"required", {"city", "unit"}},
                       {"additionalProperties", false}};

}  // namespace

TEST_CASE("vocabulary: every ordinary token is in the trie; special tokens are not") {
  auto v = demo_vocab();
  const auto& tok = demo_tokenizer();
  CHECK(v->size() == tok.vocab_size());
  std::size_t special = 0;
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) special += tok.is_special(static_cast<std::int32_t>(i));
  CHECK(special > 0);
  CHECK(v->ordinary_tokens() == tok.vocab_size() - special);
  std::size_t tokens_in_trie = 0;
  for (const auto& n : v->nodes())
    for (std::int32_t id = n.first_token; id >= 0; id = v->next_same(id)) ++tokens_in_trie;
  CHECK(tokens_in_trie == v->ordinary_tokens());
  CHECK(v->bytes(tok.token_to_id("<|endoftext|>").value()).empty());
}

TEST_CASE("mask: the trie walk keeps exactly what a token-by-token check keeps") {
  const std::vector<std::pair<json, std::vector<std::string>>> cases = {
      {kWeather, {"", "{", "{\"", "{\"c", "{\"city\":\"Os", "{\"city\":\"Os\\", "{\"city\":\"x\",", "{\"city\":\"x\",\"unit\":\"c",
                  "{\"days\":1", "{\"days\":12,\"unit\":\"fahrenheit\",\"city\":\"\xc3"}},
      {json::object(), {"", "{", "{\"a\":", "{\"a\":[1,", "{\"a\":-0.5e", "{\"a\":tr"}},
  };
  for (const auto& [s, prefixes] : cases) {
    auto g = schema_grammar(s);
    REQUIRE(g.ok());
    for (const auto& p : prefixes)
      for (int budget : {4, 9, 14, 40}) {
        JsonConstraint c(*g, demo_vocab(), {0}, budget);
        JsonMachine probe(*g);
        REQUIRE(probe.feed(p));
        auto fed = feed_text(c, p, demo_tokenizer());
        if (!fed) continue;  // budget too small to even hold the prefix
        INFO("schema " << s.dump() << " prefix '" << p << "' budget " << budget);
        const auto expected = brute_force_allowed(*g, *demo_vocab(), p, budget - c.tokens_taken() - 1, {0});
        CHECK(c.allowed_tokens() == expected);
      }
  }
}

TEST_CASE("random logits under the mask: documents parse, satisfy the schema, end within max_tokens") {
  const auto& tok = demo_tokenizer();
  const std::int32_t eos = tok.token_to_id("<|endoftext|>").value();
  std::vector<std::pair<std::string, std::shared_ptr<const Grammar>>> grammars;
  grammars.emplace_back(kWeather.dump(), *schema_grammar(kWeather));
  grammars.emplace_back("json_object", json_object_grammar());
  grammars.emplace_back("array", *schema_grammar({{"type", "array"}, {"items", {{"type", "integer"}}}}));
  auto tools = tool_call_grammar({{"get_weather", kWeather}, {"noop", nullptr}});
  REQUIRE(tools.ok());
  grammars.emplace_back("tool union", *tools);
  std::mt19937_64 rng(11);
  int runs = 0, closed_by_budget = 0;
  for (const auto& [name, g] : grammars) {
    const int floor = JsonMachine(g).min_close();
    for (int trial = 0; trial < 40; ++trial) {
      const int budget = floor + static_cast<int>(rng() % 30);
      JsonConstraint c(g, demo_vocab(), {eos}, budget);
      const Generated out = generate_random(c, tok, budget, rng);
      INFO(name << " budget " << budget << " text " << out.text);
      CHECK_FALSE(c.violated());
      REQUIRE(c.finished());
      CHECK(out.tokens <= budget);
      const json doc = json::parse(out.text);
      if (name == "tool union") {
        CHECK(doc.size() == 2);
        const json& args = doc["arguments"];
        if (doc["name"] == "get_weather") CHECK(violation(args, kWeather).empty());
        else CHECK(doc["name"] == "noop");
      } else if (name == "json_object") {
        CHECK(doc.is_object());
      } else if (name == "array") {
        CHECK(violation(doc, {{"type", "array"}, {"items", {{"type", "integer"}}}}).empty());
      } else {
        CHECK(violation(doc, kWeather).empty());
      }
      closed_by_budget += out.tokens >= budget - 1;
      ++runs;
    }
  }
  CHECK(runs == 160);
  // Random logits keep writing while they may: most runs use (nearly) the whole budget, which is
  // the case budget awareness exists for.
  CHECK(closed_by_budget > 80);
}

TEST_CASE("max_tokens equal to the shortest document still closes it; stop tokens only when complete") {
  const auto& tok = demo_tokenizer();
  const std::int32_t eos = tok.token_to_id("<|endoftext|>").value();
  auto g = *schema_grammar(kWeather);
  const int floor = JsonMachine(g).min_close();
  CHECK(floor == static_cast<int>(std::string(R"({"city":"","unit":"celsius"})").size()));
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 10; ++trial) {
    JsonConstraint c(g, demo_vocab(), {eos}, floor);
    const Generated out = generate_random(c, tok, floor, rng);
    CHECK(c.finished());
    CHECK(violation(json::parse(out.text), kWeather).empty());
  }
  // A top-level number may end with a stop token once it is a number.
  auto num = *schema_grammar({{"type", "number"}});
  JsonConstraint c(num, demo_vocab(), {eos}, 10);
  auto first = c.allowed_tokens();
  CHECK(std::find(first.begin(), first.end(), eos) == first.end());
  c.advance(tok.token_to_id("7").value());
  auto next = c.allowed_tokens();
  CHECK(std::find(next.begin(), next.end(), eos) != next.end());
  CHECK_FALSE(c.finished());
  c.advance(eos);
  CHECK(c.finished());
  CHECK_FALSE(c.violated());
}
