#include <doctest/doctest.h>

#include "openai_request.hpp"

using namespace tandem::engine::api;
using nlohmann::json;

namespace {
template <class T>
ApiError error_of(const Parsed<T>& p) {
  REQUIRE(std::holds_alternative<ApiError>(p));
  return std::get<ApiError>(p);
}
json chat(json extra = json::object()) {
  json b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  b.update(extra);
  return b;
}
}  // namespace

TEST_CASE("a full chat request reads every field") {
  auto p = parse_chat_request(chat({{"max_tokens", 40}, {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 20},
                                    {"seed", 7}, {"stop", {"###", "END"}}, {"stream", true},
                                    {"stream_options", {{"include_usage", true}}},
                                    {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}}},
                                    {"tool_choice", "auto"}, {"response_format", {{"type", "json_object"}}},
                                    {"chat_template_kwargs", {{"enable_thinking", false}}}, {"prefix_cache", false}}));
  REQUIRE(std::holds_alternative<ChatRequest>(p));
  const auto& r = std::get<ChatRequest>(p);
  CHECK(r.sampling.max_tokens == 40);
  CHECK(r.sampling.temperature == 0.5);
  CHECK(r.sampling.top_k == 20);
  CHECK(r.sampling.seed == 7u);
  CHECK(r.sampling.stop == std::vector<std::string>{"###", "END"});
  CHECK(r.sampling.stream);
  CHECK(r.sampling.include_usage);
  CHECK_FALSE(r.sampling.prefix_cache);
  CHECK(r.tools.size() == 1);
  CHECK(r.response_format == "json_object");
  CHECK(r.chat_template_kwargs["enable_thinking"] == false);
}

TEST_CASE("text parts are flattened; images are refused by name") {
  auto p = parse_chat_request(chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}}}));
  REQUIRE(std::holds_alternative<ChatRequest>(p));
  CHECK(std::get<ChatRequest>(p).messages[0]["content"] == "ab");
  auto e = error_of(parse_chat_request(chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}})));
  CHECK(e.param == "messages[0].content");
}

TEST_CASE("each bad field is named in an OpenAI-shaped error") {
  CHECK(error_of(parse_chat_request(json::array())).message == "the request body must be a JSON object");
  CHECK(error_of(parse_chat_request(json{{"messages", json::array()}})).param == "messages");
  CHECK(error_of(parse_chat_request(chat({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}))).message ==
        "'messages[0].role' is 'robot'; expected system, developer, user, assistant or tool");
  CHECK(error_of(parse_chat_request(chat({{"temperature", 3}}))).message == "'temperature' is 3; expected 0.0 to 2.0");
  CHECK(error_of(parse_chat_request(chat({{"max_tokens", 0}}))).param == "max_tokens");
  CHECK(error_of(parse_chat_request(chat({{"max_tokens", "ten"}}))).message == "'max_tokens' must be an integer");
  CHECK(error_of(parse_chat_request(chat({{"top_k", 0}}))).param == "top_k");
  CHECK(error_of(parse_chat_request(chat({{"n", 2}}))).message == "only n = 1 is supported");
  CHECK(error_of(parse_chat_request(chat({{"stop", 5}}))).param == "stop");
  CHECK(error_of(parse_chat_request(chat({{"tool_choice", "required"}}))).message == "'tool_choice' asks for a tool but 'tools' is empty");
  CHECK(error_of(parse_chat_request(chat({{"tools", {{{"type", "function"}}}}}))).param == "tools[0]");
  CHECK(error_of(parse_chat_request(chat({{"response_format", {{"type", "yaml"}}}}))).param == "response_format.type");
  auto e = error_of(parse_chat_request(chat({{"stream", "yes"}})));
  CHECK(e.to_json() == json::parse(R"({"error":{"message":"'stream' must be true or false","type":"invalid_request_error","param":"stream","code":400}})"));
}

TEST_CASE("assistant turns with tool calls may have no content; tool results need their call id") {
  json msgs = {{{"role", "user"}, {"content", "weather?"}},
               {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "w"}, {"arguments", "{}"}}}}}}},
               {{"role", "tool"}, {"content", "sunny"}}};
  CHECK(error_of(parse_chat_request(chat({{"messages", msgs}}))).param == "messages[2].tool_call_id");
  msgs[2]["tool_call_id"] = "c1";
  CHECK(std::holds_alternative<ChatRequest>(parse_chat_request(chat({{"messages", msgs}}))));
}

TEST_CASE("completions take a string or token ids") {
  auto s = parse_completion_request(json{{"prompt", "once upon"}, {"max_tokens", 5}});
  REQUIRE(std::holds_alternative<CompletionRequest>(s));
  auto ids = parse_completion_request(json{{"prompt", {1, 2, 3}}});
  REQUIRE(std::holds_alternative<CompletionRequest>(ids));
  CHECK(std::get<std::vector<std::int32_t>>(std::get<CompletionRequest>(ids).prompt).size() == 3);
  CHECK(error_of(parse_completion_request(json{{"prompt", {1, -2}}})).param == "prompt");
  CHECK(error_of(parse_completion_request(json{{"prompt", {"a", "b"}}})).param == "prompt");
  CHECK(error_of(parse_completion_request(json::object())).message == "'prompt' is missing");
}

TEST_CASE("unknown parameters are refused by name; OpenAI's unimplemented ones only at their neutral value") {
  auto e = error_of(parse_chat_request(chat({{"temprature", 0.5}})));
  CHECK(e.param == "temprature");
  CHECK(e.message.find("unknown parameter 'temprature' for chat completions") == 0);
  CHECK(error_of(parse_completion_request(json{{"prompt", "x"}, {"messages", json::array()}})).param == "messages");
  CHECK(error_of(parse_chat_request(chat({{"echo", true}}))).param == "echo");  // a completions field
  CHECK(error_of(parse_chat_request(chat({{"best_of", 1}}))).param == "best_of");
  // A long unknown key is quoted short.
  const std::string key(5000, 'k');
  CHECK(error_of(parse_chat_request(chat({{key, 1}}))).message.size() < 1200);

  // Neutral values of fields this server does not implement pass; caller metadata passes.
  auto ok = parse_chat_request(chat({{"frequency_penalty", 0}, {"presence_penalty", 0.0}, {"repetition_penalty", 1},
                                     {"logit_bias", json::object()}, {"logprobs", false}, {"top_logprobs", 0},
                                     {"user", "u-1"}, {"metadata", {{"k", "v"}}}, {"store", false},
                                     {"parallel_tool_calls", true}, {"skip_special_tokens", true}}));
  CHECK(std::holds_alternative<ChatRequest>(ok));
  CHECK(error_of(parse_chat_request(chat({{"frequency_penalty", 0.5}}))).param == "frequency_penalty");
  CHECK(error_of(parse_chat_request(chat({{"presence_penalty", "0"}}))).message == "'presence_penalty' must be a number");
  CHECK(error_of(parse_chat_request(chat({{"parallel_tool_calls", false}}))).param == "parallel_tool_calls");
  CHECK(error_of(parse_chat_request(chat({{"user", 5}}))).param == "user");
}

TEST_CASE("logprobs and logit_bias: checked, then refused by name rather than answered null") {
  auto lp = error_of(parse_chat_request(chat({{"logprobs", true}})));
  CHECK(lp.param == "logprobs");
  CHECK(lp.message.find("not supported") != std::string::npos);
  CHECK(error_of(parse_chat_request(chat({{"logprobs", 1}}))).message == "'logprobs' must be true or false");
  CHECK(error_of(parse_chat_request(chat({{"top_logprobs", 100}}))).param == "top_logprobs");
  CHECK(error_of(parse_completion_request(json{{"prompt", "x"}, {"logprobs", 5}})).param == "logprobs");
  CHECK(std::holds_alternative<CompletionRequest>(parse_completion_request(json{{"prompt", "x"}, {"logprobs", 0}})));
  CHECK(error_of(parse_chat_request(chat({{"logit_bias", {{"abc", 1}}}}))).message ==
        "'logit_bias' key 'abc' is not a token id");
  CHECK(error_of(parse_chat_request(chat({{"logit_bias", {{"12", 500}}}}))).message ==
        "'logit_bias' for token 12 must be a number from -100 to 100");
  CHECK(error_of(parse_chat_request(chat({{"logit_bias", {{"12", 5}}}}))).message.find("not supported") !=
        std::string::npos);
  CHECK(error_of(parse_chat_request(chat({{"logit_bias", 3}}))).param == "logit_bias");
}

TEST_CASE("fields of the wrong type or size are 400s, never exceptions") {
  // nlohmann's value() throws when the field holds another type; these must be answered.
  CHECK(error_of(parse_chat_request(chat({{"messages", {{{"role", "user"}, {"content", {{{"type", 5}, {"text", "a"}}}}}}}})))
            .param == "messages[0].content");
  CHECK(error_of(parse_chat_request(chat({{"tools", {{{"type", json::array()}, {"function", {{"name", "f"}}}}}}})))
            .param == "tools[0]");
  // 2^64 - 1 must not wrap to -1 and slip through as "is -1".
  auto huge = error_of(parse_chat_request(chat({{"max_tokens", 18446744073709551615ULL}})));
  CHECK(huge.param == "max_tokens");
  CHECK(huge.message == "'max_tokens' is 18446744073709551615; expected 1 to 1073741824");
  CHECK(std::get<ChatRequest>(parse_chat_request(chat({{"seed", 18446744073709551615ULL}}))).sampling.seed ==
        18446744073709551615ULL);
  CHECK(error_of(parse_chat_request(chat({{"temperature", -0.5}}))).param == "temperature");
}

TEST_CASE("an error quoting invalid UTF-8 still serialises (U+FFFD), it does not throw") {
  ApiError e;
  e.message = std::string("no route /\xff\xfe");
  std::string body;
  CHECK_NOTHROW(body = e.body());
  CHECK(body.find("\xEF\xBF\xBD") != std::string::npos);
  CHECK(json::parse(body)["error"]["code"] == 400);
}
