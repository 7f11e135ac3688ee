#include "http_request.hpp"

#include <cctype>
#include <cstdint>
#include <utility>

namespace tandem::engine::api {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void configure_request_parser(RequestParser& parser, const HttpServerOptions& options) {
  parser.header_limit(static_cast<std::uint32_t>(options.header_limit));
  parser.body_limit(options.body_limit);
}

HttpRequest to_http_request(RequestMessage&& msg) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  const auto q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& h : msg) req.headers[lower(std::string(h.name_string()))] = std::string(h.value());
  req.body = std::move(msg.body());
  return req;
}

}  // namespace tandem::engine::api
