#include "tandem/net/router.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <set>

namespace tandem::net {

Router& Router::on(std::string method, std::string path, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), false, std::move(handler)});
  return *this;
}

Router& Router::on_prefix(std::string method, std::string prefix, Handler handler) {
  routes_.push_back({std::move(method), std::move(prefix), true, std::move(handler)});
  return *this;
}

Router& Router::on_json(std::string method, std::string path, JsonHandler handler) {
  return on(std::move(method), std::move(path),
            [h = std::move(handler)](const Request& request) {
              auto body = request.json();
              if (!body) return Response::bad_request(body.error());
              return h(request, *body);
            });
}

Response Router::dispatch(Request& request) const {
  const Route* best = nullptr;
  std::set<std::string> allowed;
  for (const auto& route : routes_) {
    const bool path_matches = route.prefix ? request.path.starts_with(route.path)
                                           : request.path == route.path;
    if (!path_matches) continue;
    allowed.insert(route.method);
    if (route.method != request.method) continue;
    // Exact beats prefix; among prefixes the longest (most specific) wins.
    const bool better = best == nullptr || (best->prefix && !route.prefix) ||
                        (best->prefix && route.prefix && route.path.size() > best->path.size());
    if (better) best = &route;
  }
  if (best == nullptr && allowed.empty())
    return Response::error(404, "no such endpoint: " + request.path);
  if (best == nullptr) {
    std::string allow;
    for (const auto& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
    Response r = Response::error(405, request.method + " is not allowed on " + request.path +
                                          " (allowed: " + allow + ")");
    r.headers.emplace_back("Allow", allow);
    return r;
  }
  request.path_tail = best->prefix ? request.path.substr(best->path.size()) : std::string{};
  try {
    return best->handler(request);
  } catch (const std::exception& e) {
    spdlog::error("handler for {} {} threw: {}", request.method, request.path, e.what());
  } catch (...) {
    spdlog::error("handler for {} {} threw a non-standard exception", request.method,
                  request.path);
  }
  return Response::error(500, "internal error");
}

}  // namespace tandem::net
