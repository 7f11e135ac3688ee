#include <doctest/doctest.h>

#include "tokenize_request.hpp"

using namespace tandem::engine::api;
using nlohmann::json;

namespace {
template <class T>
ApiError refused(const Parsed<T>& p) {
  REQUIRE(std::holds_alternative<ApiError>(p));
  return std::get<ApiError>(p);
}
}  // namespace

TEST_CASE("tokenize: a prompt adds special tokens by default, a chat does not (its template writes them)") {
  auto p = parse_tokenize_request(json{{"prompt", "hi"}});
  REQUIRE(std::holds_alternative<TokenizeRequest>(p));
  CHECK(std::get<TokenizeRequest>(p).prompt == "hi");
  CHECK(std::get<TokenizeRequest>(p).add_special_tokens);
  CHECK(!std::get<TokenizeRequest>(p).return_token_strs);

  auto c = parse_tokenize_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                       {"add_generation_prompt", false}, {"return_token_strs", true}, {"model", "m"}});
  REQUIRE(std::holds_alternative<TokenizeRequest>(c));
  const auto& r = std::get<TokenizeRequest>(c);
  REQUIRE(r.chat);
  CHECK(!r.chat->add_generation_prompt);
  CHECK(!r.add_special_tokens);
  CHECK(r.return_token_strs);
  CHECK(r.model == "m");
}

TEST_CASE("tokenize: wrong shapes are 400s naming the field") {
  CHECK(refused(parse_tokenize_request(json::array())).param == "");
  CHECK(refused(parse_tokenize_request(json{{"prompt", "a"}, {"messages", json::array()}})).param == "messages");
  CHECK(refused(parse_tokenize_request(json{{"prompt", {1, 2}}})).param == "prompt");
  CHECK(refused(parse_tokenize_request(json{{"prompt", "a"}, {"model", 3}})).param == "model");
  CHECK(refused(parse_tokenize_request(json{{"prompt", "a"}, {"return_token_strs", 1}})).param == "return_token_strs");
  CHECK(refused(parse_tokenize_request(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"temperature", 0}}))
            .param == "temperature");
  CHECK(refused(parse_tokenize_request(json{{"messages", {{{"role", "robot"}, {"content", "x"}}}}})).status == 400);
}

TEST_CASE("detokenize: integer ids only; range is the route's (it knows the vocabulary)") {
  auto p = parse_detokenize_request(json{{"tokens", {0, 5, -3}}});
  REQUIRE(std::holds_alternative<DetokenizeRequest>(p));
  CHECK(std::get<DetokenizeRequest>(p).tokens == std::vector<std::int64_t>{0, 5, -3});
  // Past int64: kept out of range, never wrapped into a valid id.
  auto big = parse_detokenize_request(json::parse(R"({"tokens": [18446744073709551615]})"));
  REQUIRE(std::holds_alternative<DetokenizeRequest>(big));
  CHECK(std::get<DetokenizeRequest>(big).tokens.front() == INT64_MAX);
  CHECK(refused(parse_detokenize_request(json{{"tokens", {1.5}}})).param == "tokens");
  CHECK(refused(parse_detokenize_request(json{{"tokens", "12"}})).param == "tokens");
  CHECK(refused(parse_detokenize_request(json::object())).param == "tokens");
  CHECK(refused(parse_detokenize_request(json{{"tokens", {1}}, {"skip", true}})).param == "skip");
}
