// The JSON body of a POST, or the 400 that says why it is not JSON (with the parser's position).
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "openai_request.hpp"

namespace tandem::engine::serve {

std::optional<nlohmann::json> parse_body(const std::string& body, api::ApiError& error);

}  // namespace tandem::engine::serve
