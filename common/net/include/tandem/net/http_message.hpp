// What a handler sees and returns: plain structs, no Beast, so handlers compile fast.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::net {

// "a b/c" -> "a%20b%2Fc": every byte but the unreserved characters, for a query value that
// Request::query_param gives back as it was.
std::string percent_encode(std::string_view text);

struct Request {
  std::string method;     // "GET", "POST", ... as sent
  std::string target;     // "/v1/steps/cron?dry_run=1"
  std::string path;       // "/v1/steps/cron"
  std::string query;      // "dry_run=1", still percent-encoded
  std::string path_tail;  // what follows a matched prefix route; "" for exact routes
  std::string body;
  std::string client_cn;  // CN of the verified client certificate

  // The body as JSON; an error names the parse position ("... at line 1, column 7: ...").
  Result<nlohmann::json> json() const;
  // A query parameter, percent-decoded; nullopt when absent.
  std::optional<std::string> query_param(std::string_view name) const;
};

struct Response {
  unsigned status = 200;
  nlohmann::json body = nlohmann::json::object();
  std::vector<std::pair<std::string, std::string>> headers{};  // extra headers, e.g. Allow
  // Bytes sent as they are (application/octet-stream) instead of `body`: a staged file's chunk.
  std::optional<std::string> raw{};

  // {"error": message}, the one error shape every endpoint uses.
  static Response error(unsigned status, std::string message);
  static Response bad_request(const Error& err) { return error(400, err.message); }
};

}  // namespace tandem::net
