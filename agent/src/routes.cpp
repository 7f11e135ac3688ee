#include "routes.hpp"

#include <charconv>

namespace tandem::agentd {
namespace {

using nlohmann::json;

net::Response to_response(const Outcome& o) {
  net::Response r;
  r.status = o.status;
  r.body = o.body;
  return r;
}

// A required string field of a JSON body, or the 400 that says which.
std::optional<net::Response> need_string(const json& body, const char* key, std::string& out) {
  if (!body.is_object() || !body.contains(key) || !body[key].is_string())
    return net::Response::error(400, std::string("the body needs a string field '") + key + "'");
  out = body[key].get<std::string>();
  return std::nullopt;
}

double number_or(const json& body, const char* key, double fallback) {
  if (body.is_object() && body.contains(key) && body[key].is_number()) return body[key].get<double>();
  return fallback;
}

std::size_t query_size(const net::Request& req, const char* key, std::size_t fallback, std::size_t max) {
  auto v = req.query_param(key);
  if (!v) return fallback;
  std::size_t n = fallback;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || p != v->data() + v->size()) return fallback;
  return std::min(n, max);
}

}  // namespace

net::Router make_router(Daemon& d) {
  net::Router r;
  r.on("GET", "/v1/health", [&d](const net::Request&) { return to_response(d.health()); });
  r.on_json("PUT", "/v1/manifest", [&d](const net::Request&, const json& body) {
    std::string yaml;
    if (auto bad = need_string(body, "yaml", yaml)) return *bad;
    return to_response(d.put_manifest(yaml));
  });
  // GET /v1/steps/<step>: check. POST /v1/steps/<step>/apply {op_id}.
  r.on_prefix("GET", "/v1/steps/", [&d](const net::Request& req) { return to_response(d.step_check(req.path_tail)); });
  r.on_prefix("POST", "/v1/steps/", [&d](const net::Request& req) {
    const auto slash = req.path_tail.find('/');
    if (slash == std::string::npos || req.path_tail.substr(slash + 1) != "apply")
      return net::Response::error(404, "expected POST /v1/steps/<step>/apply");
    auto body = req.json();
    if (!body) return net::Response::bad_request(body.error());
    std::string op;
    if (auto bad = need_string(body.value(), "op_id", op)) return *bad;
    return to_response(d.step_apply(req.path_tail.substr(0, slash), op));
  });
  // POST /v1/ops/<op_id>/verify | /undo
  r.on_prefix("POST", "/v1/ops/", [&d](const net::Request& req) {
    const auto slash = req.path_tail.find('/');
    const std::string op = req.path_tail.substr(0, slash);
    const std::string verb = slash == std::string::npos ? "" : req.path_tail.substr(slash + 1);
    if (verb == "verify") return to_response(d.op_verify(op));
    if (verb == "undo") return to_response(d.op_undo(op));
    return net::Response::error(404, "expected POST /v1/ops/<op_id>/verify or /undo");
  });
  r.on("POST", "/v1/undo-incomplete", [&d](const net::Request&) { return to_response(d.undo_incomplete()); });
  r.on("GET", "/v1/journal", [&d](const net::Request& req) {
    return to_response(d.journal(req.query_param("op_id").value_or("")));
  });
  r.on_json("POST", "/v1/engine/start", [&d](const net::Request&, const json& body) {
    std::string op;
    if (auto bad = need_string(body, "op_id", op)) return *bad;
    return to_response(d.engine_start(op));
  });
  r.on_json("POST", "/v1/engine/wait-ready", [&d](const net::Request&, const json& body) {
    return to_response(d.engine_wait_ready(std::clamp(number_or(body, "timeout_s", 60), 0.0, 3600.0)));
  });
  r.on_json("POST", "/v1/engine/stop", [&d](const net::Request&, const json& body) {
    return to_response(d.engine_stop(std::clamp(number_or(body, "grace_s", 10), 0.0, 600.0)));
  });
  r.on("GET", "/v1/engine", [&d](const net::Request&) { return to_response(d.engine_status()); });
  r.on("GET", "/v1/engine/log", [&d](const net::Request& req) {
    return to_response(d.engine_log(query_size(req, "lines", 100, 10000)));
  });
  r.on_json("POST", "/v1/deadman/arm", [&d](const net::Request&, const json& body) {
    std::string op;
    if (auto bad = need_string(body, "op_id", op)) return *bad;
    return to_response(d.deadman_arm(op));
  });
  r.on_json("POST", "/v1/deadman/disarm", [&d](const net::Request&, const json& body) {
    std::string op;
    if (auto bad = need_string(body, "op_id", op)) return *bad;
    return to_response(d.deadman_disarm(op));
  });
  r.on("GET", "/v1/deadman", [&d](const net::Request&) { return to_response(d.deadman_status()); });
  r.on_json("POST", "/v1/rollback/start", [&d](const net::Request&, const json& body) {
    std::string op;
    if (auto bad = need_string(body, "op_id", op)) return *bad;
    return to_response(d.rollback_start(op));
  });
  return r;
}

}  // namespace tandem::agentd
