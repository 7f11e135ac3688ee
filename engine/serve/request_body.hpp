// The JSON body of a POST, or the 400 that says why not: not JSON (with the parser's position),
// not UTF-8 (the byte and its offset), a number no double holds, or nested too deep.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "openai_request.hpp"

namespace tandem::engine::serve {

// Deeper than any real request (a tool schema rarely passes 10), shallow enough for every
// recursive walk of the document (dump, the template renderer) to stay far inside the stack.
constexpr int kMaxBodyDepth = 128;

std::optional<nlohmann::json> parse_body(const std::string& body, api::ApiError& error);

}  // namespace tandem::engine::serve
