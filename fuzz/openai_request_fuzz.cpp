// The OpenAI request checks, on a POST body exactly as the routes see it: parse_body (the JSON
// or the 400 saying why not), then parse_chat_request and parse_completion_request, and every
// answer serialised as the server sends it. tandem-serve has no exception guard around a
// handler, so anything thrown here would end the process: it is a crash for the fuzzer too.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "fuzz_check.hpp"
#include "openai_request.hpp"
#include "request_body.hpp"

using namespace tandem::engine;

namespace {

// The 4xx as service.cpp's reject() writes it.
void answer(const api::ApiError& e) {
  tandem::fuzz::check(e.status >= 400 && e.status < 600, "an error that is not a 4xx/5xx");
  tandem::fuzz::check(!e.message.empty(), "an error without a message");
  // What the client receives must be JSON it can read; the strict dump also catches a message
  // that quotes half a UTF-8 sequence (body() would only mask it with U+FFFD).
  tandem::fuzz::check(!nlohmann::json::parse(e.body(), nullptr, false).is_discarded(), "an error body that is not JSON");
  (void)e.to_json().dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  api::ApiError err;
  auto json = serve::parse_body(body, err);
  if (!json) {
    answer(err);
    return 0;
  }
  auto chat = api::parse_chat_request(*json);
  if (auto* e = std::get_if<api::ApiError>(&chat)) {
    answer(*e);
  } else {
    // What chat_route.cpp does next with the checked request before the template sees it.
    const auto& r = std::get<api::ChatRequest>(chat);
    (void)r.messages.dump();
    (void)nlohmann::json::parse(r.tools.dump());
    for (const auto& [k, v] : r.chat_template_kwargs.items()) (void)v.dump();
  }
  auto completion = api::parse_completion_request(*json);
  if (auto* e = std::get_if<api::ApiError>(&completion)) answer(*e);
  return 0;
}
