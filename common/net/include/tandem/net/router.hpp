// Routing (method, path) to handlers; the server calls dispatch() once per request.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tandem/net/http_message.hpp"

namespace tandem::net {

using Handler = std::function<Response(const Request&)>;
// For endpoints that take a JSON body: a malformed body is answered 400 before the handler runs.
using JsonHandler = std::function<Response(const Request&, const nlohmann::json&)>;

class Router {
 public:
  Router& on(std::string method, std::string path, Handler handler);
  // Matches `prefix` and everything below it; the rest of the path is in Request::path_tail.
  // An exact route wins over a prefix, and a longer prefix over a shorter one.
  Router& on_prefix(std::string method, std::string prefix, Handler handler);
  Router& on_json(std::string method, std::string path, JsonHandler handler);

  // Never throws: unknown path 404, known path with another method 405 (with Allow), a handler
  // that throws 500 with a generic message (the exception goes to the log, not to the client).
  Response dispatch(Request& request) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace tandem::net
