#include "request_body.hpp"

namespace tandem::engine::serve {

std::optional<nlohmann::json> parse_body(const std::string& body, api::ApiError& error) {
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    error.status = 400;
    error.message = std::string("the request body is not valid JSON: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace tandem::engine::serve
