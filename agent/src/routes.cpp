#include "routes.hpp"

#include <charconv>
#include <cstdint>

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

// An optional number field within [lo, hi] (absent or null: `out` keeps its default), or the 400
// that names it: a wrong type or a value out of range is the caller's mistake, not a default.
std::optional<net::Response> number_in(const json& body, const char* key, double lo, double hi, double& out) {
  if (!body.is_object() || !body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_number()) return net::Response::error(400, std::string("'") + key + "' must be a number");
  const double v = body[key].get<double>();
  if (!(v >= lo && v <= hi))
    return net::Response::error(400, std::string("'") + key + "' is " + body[key].dump() + "; expected " +
                                         json(lo).dump() + " to " + json(hi).dump());
  out = v;
  return std::nullopt;
}

// An optional count in the query (absent: `out` keeps its default; above max: max), or the 400
// that names it.
std::optional<net::Response> query_size(const net::Request& req, const char* key, std::size_t max, std::size_t& out) {
  auto v = req.query_param(key);
  if (!v) return std::nullopt;
  std::size_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (v->empty() || ec != std::errc() || p != v->data() + v->size())
    return net::Response::error(400, std::string("query parameter '") + key + "' must be a count (0 to " +
                                         std::to_string(max) + ")");
  out = std::min(n, max);
  return std::nullopt;
}

// A required unsigned number in the query (int64 range), or the 400 that names it.
std::optional<net::Response> query_u64(const net::Request& req, const char* key, std::uint64_t& out) {
  auto v = req.query_param(key);
  std::uint64_t n = 0;
  if (!v) return net::Response::error(400, std::string("query parameter '") + key + "' is required");
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (v->empty() || ec != std::errc() || p != v->data() + v->size() || n > static_cast<std::uint64_t>(INT64_MAX))
    return net::Response::error(400, std::string("query parameter '") + key + "' must be a non-negative integer");
  out = n;
  return std::nullopt;
}

// GET /v1/stage/source/chunk?path=&offset=&length=&size=&mtime_ns= -> the bytes.
net::Response stage_chunk(Daemon& d, const net::Request& req) {
  agent::SourceFile f;
  f.path = req.query_param("path").value_or("");
  std::uint64_t offset = 0, length = 0, mtime = 0;
  if (auto bad = query_u64(req, "offset", offset)) return *bad;
  if (auto bad = query_u64(req, "length", length)) return *bad;
  if (auto bad = query_u64(req, "size", f.size)) return *bad;
  if (auto bad = query_u64(req, "mtime_ns", mtime)) return *bad;
  f.mtime_ns = static_cast<std::int64_t>(mtime);
  if (f.path.empty() || f.path.front() != '/') return net::Response::error(400, "query parameter 'path' must be an absolute path");
  std::string bytes;
  Outcome o = d.stage_source_chunk(req.client_cn, f, offset, length, bytes);
  if (o.status != 200) return to_response(o);
  net::Response r;
  r.raw = std::move(bytes);
  return r;
}

// Manifest, steps, ops and the journal: the operation lifecycle.
void add_operation_routes(net::Router& r, Daemon& d) {
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
  // POST /v1/stage/release {"keep":[op_id...], "keep_prefixes":[prefix...]}: free the backups of
  // every other verified stage op.
  r.on_json("POST", "/v1/stage/release", [&d](const net::Request&, const json& body) {
    std::vector<std::string> keep, prefixes;
    for (auto [key, out] : {std::pair<const char*, std::vector<std::string>*>{"keep", &keep}, {"keep_prefixes", &prefixes}}) {
      if (!body.contains(key)) continue;
      if (!body[key].is_array()) return net::Response::error(400, std::string("'") + key + "' must be a list of op ids");
      for (const auto& k : body[key]) {
        if (!k.is_string() || !agent::valid_op_id(k.get<std::string>()))
          return net::Response::error(400, std::string("'") + key + "' holds something that is not an op id: " + k.dump());
        out->push_back(k.get<std::string>());
      }
    }
    return to_response(d.stage_release(keep, prefixes));
  });
  r.on("GET", "/v1/journal", [&d](const net::Request& req) {
    return to_response(d.journal(req.query_param("op_id").value_or("")));
  });
}

// The engine process: start, wait for ready, stop, status and log.
void add_engine_routes(net::Router& r, Daemon& d) {
  r.on_json("POST", "/v1/engine/start", [&d](const net::Request&, const json& body) {
    std::string op;
    if (auto bad = need_string(body, "op_id", op)) return *bad;
    return to_response(d.engine_start(op));
  });
  r.on_json("POST", "/v1/engine/wait-ready", [&d](const net::Request&, const json& body) {
    double timeout_s = 60;
    if (auto bad = number_in(body, "timeout_s", 0, 86400, timeout_s)) return *bad;
    return to_response(d.engine_wait_ready(timeout_s));
  });
  r.on_json("POST", "/v1/engine/stop", [&d](const net::Request&, const json& body) {
    double grace_s = 10;
    if (auto bad = number_in(body, "grace_s", 0, 86400, grace_s)) return *bad;
    return to_response(d.engine_stop(grace_s));
  });
  r.on("GET", "/v1/engine", [&d](const net::Request&) { return to_response(d.engine_status()); });
  r.on("GET", "/v1/engine/log", [&d](const net::Request& req) {
    std::size_t lines = 100;
    if (auto bad = query_size(req, "lines", 10000, lines)) return *bad;
    return to_response(d.engine_log(lines));
  });
}

// The dead-man switch and the rollback it triggers.
void add_deadman_routes(net::Router& r, Daemon& d) {
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
}

// Stage source (served to peers too), stage progress and gates.
void add_stage_and_gate_routes(net::Router& r, Daemon& d) {
  // Served to the other nodes' agents too (main.cpp's peer prefix); the daemon checks the CN.
  r.on("GET", "/v1/stage/source/list", [&d](const net::Request& req) { return to_response(d.stage_source_list(req.client_cn)); });
  r.on("GET", "/v1/stage/source/chunk", [&d](const net::Request& req) { return stage_chunk(d, req); });
  r.on("GET", "/v1/stage/progress", [&d](const net::Request&) { return to_response(d.stage_progress()); });
  // stage.from: controller (the controller only: these are not under the peer prefix).
  // PUT /v1/stage/push/listing {entries}; POST /v1/stage/push/take {wait_ms} -> {want|null};
  // PUT /v1/stage/push/chunk?id=N with the bytes; POST /v1/stage/push/fail {id, error}.
  r.on_json("PUT", "/v1/stage/push/listing", [&d](const net::Request&, const json& body) {
    return to_response(d.stage_push_listing(body));
  });
  r.on_json("POST", "/v1/stage/push/take", [&d](const net::Request&, const json& body) {
    double wait_ms = 250;
    if (auto bad = number_in(body, "wait_ms", 0, 5000, wait_ms)) return *bad;
    return to_response(d.stage_push_take(std::chrono::milliseconds(static_cast<long long>(wait_ms))));
  });
  r.on("PUT", "/v1/stage/push/chunk", [&d](const net::Request& req) {
    std::uint64_t id = 0;
    if (auto bad = query_u64(req, "id", id)) return *bad;
    return to_response(d.stage_push_chunk(id, req.body));
  });
  r.on_json("POST", "/v1/stage/push/fail", [&d](const net::Request&, const json& body) {
    double id = 0;
    std::string why;
    if (auto bad = number_in(body, "id", 0, 9e15, id)) return *bad;
    if (auto bad = need_string(body, "error", why)) return *bad;
    return to_response(d.stage_push_fail(static_cast<std::uint64_t>(id), why));
  });
  r.on_json("POST", "/v1/gates/run", [&d](const net::Request&, const json& body) {
    std::string gate;
    if (auto bad = need_string(body, "gate", gate)) return *bad;
    return to_response(d.gate_run(gate));
  });
}

}  // namespace

net::Router make_router(Daemon& d) {
  net::Router r;
  // Registered in this order: operation, engine, dead-man, then stage source and gate routes.
  add_operation_routes(r, d);
  add_engine_routes(r, d);
  add_deadman_routes(r, d);
  add_stage_and_gate_routes(r, d);
  return r;
}

}  // namespace tandem::agentd
