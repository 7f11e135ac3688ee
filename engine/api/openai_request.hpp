// OpenAI request bodies, checked field by field. Every refusal is an ApiError in OpenAI's
// error shape ({"error": {"message", "type", "param", "code"}}) that names the field.
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tandem::engine::api {

struct ApiError {
  unsigned status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one

  nlohmann::json to_json() const;
  std::string body() const;  // to_json() as wire text; never throws on the bytes it quotes
};

struct Sampling {
  int max_tokens = 0;  // 0: up to max-model-len
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = -1;  // -1: off
  double min_p = 0.0;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool prefix_cache = true;    // tandem extension: false bypasses the prefix cache for this request
};

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json messages;  // validated array
  nlohmann::ordered_json tools;     // array or null
  std::string tool_choice = "auto"; // auto | none | required | named
  std::string tool_choice_name;     // when named
  std::string response_format = "text";  // text | json_object | json_schema
  nlohmann::json response_schema;        // json_schema: response_format.json_schema.schema
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  Sampling sampling;
};

struct CompletionRequest {
  std::string model;
  std::variant<std::string, std::vector<std::int32_t>> prompt;
  bool echo = false;
  Sampling sampling;
};

// A 400 invalid_request_error naming `param`: the one way every route and check words a refusal.
ApiError bad_request(std::string param, std::string message);

template <class T>
using Parsed = std::variant<T, ApiError>;

Parsed<ChatRequest> parse_chat_request(const nlohmann::json& body);
Parsed<CompletionRequest> parse_completion_request(const nlohmann::json& body);

}  // namespace tandem::engine::api
