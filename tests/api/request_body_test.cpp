// parse_body: a POST body that is not JSON is a 400 whose error JSON can always be sent.
// Reproduces issue 18's process-killing requests (also fuzz/corpus/openai_request/crash-*).
#include <doctest/doctest.h>

#include <string>

#include "request_body.hpp"

using tandem::engine::api::ApiError;
using tandem::engine::serve::parse_body;

TEST_CASE("invalid UTF-8 in a body is a 400 naming the byte, and its error JSON dumps") {
  ApiError err;
  const std::string body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\xff\"}]}";
  REQUIRE_FALSE(parse_body(body, err).has_value());
  CHECK(err.status == 400);
  CHECK(err.message.find("not valid UTF-8: byte 0xFF at offset 41") != std::string::npos);
  CHECK(err.message.find('\xff') == std::string::npos);
  CHECK_NOTHROW((void)err.to_json().dump());  // nlohmann's type_error.316 ended tandem-serve here
}

TEST_CASE("a number past double's range is a 400, not an escaping out_of_range") {
  for (const std::string body : {"{\"max_tokens\":1e999}", "{\"temperature\":-1e400}"}) {
    CAPTURE(body);
    ApiError err;
    REQUIRE_FALSE(parse_body(body, err).has_value());  // out_of_range.406 escaped parse_body here
    CHECK(err.status == 400);
    CHECK(err.message.find("number overflow") != std::string::npos);
    CHECK_NOTHROW((void)err.to_json().dump());
  }
}

TEST_CASE("nesting deeper than the bound is a 400 before parsing; brackets inside strings do not count") {
  ApiError err;
  REQUIRE_FALSE(parse_body(std::string(100000, '[') + std::string(100000, ']'), err).has_value());
  CHECK(err.message == "the request body nests deeper than 128 levels (at offset 128)");
  const std::string in_string = "{\"s\":\"" + std::string(1000, '[') + "\\\"\"}";
  auto ok = parse_body(in_string, err);
  REQUIRE(ok.has_value());
  CHECK((*ok)["s"].get<std::string>().size() == 1001);
}

TEST_CASE("a body that is JSON comes back parsed") {
  ApiError err;
  auto j = parse_body(R"({"prompt": "hi", "max_tokens": 3})", err);
  REQUIRE(j.has_value());
  CHECK((*j)["max_tokens"] == 3);
}
