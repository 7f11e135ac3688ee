#include "agent_client.hpp"

#include <thread>

#include "tandem/url.hpp"
#include "tandem/utf8.hpp"

namespace tandem::ctl {
namespace {

using namespace std::chrono_literals;

std::string trim_body(const std::string& body) {
  return utf8::clip(body, 300);
}

}  // namespace

Result<AgentClient> AgentClient::create(const std::filesystem::path& pki_dir, const Node& node) {
  net::PkiLayout layout{pki_dir};
  net::ClientOptions o;
  o.ca_file = layout.ca_cert();
  o.cert_file = layout.controller_cert();
  o.key_file = layout.controller_key();
  o.connect_timeout = 5s;
  o.handshake_timeout = 10s;
  auto http = net::HttpsClient::create(o);
  if (!http) return http.error().with_context("agent client for node '" + node.name + "' (PKI in " + pki_dir.string() + ")");
  return AgentClient(std::move(http.value()), node);
}

std::string AgentClient::where() const {
  return node_.name + " (" + host_port(node_.address, static_cast<std::uint16_t>(node_.agent_port)) + ")";
}

AgentReply AgentClient::call(const std::string& method, const std::string& target, const json& body, Millis timeout) const {
  const net::Endpoint ep{node_.address, static_cast<std::uint16_t>(node_.agent_port), node_.name};
  const std::string what = where() + " " + method + " " + target;
  const std::string payload = body.is_null() ? std::string() : body.dump();
  AgentReply out;
  for (int attempt = 1;; ++attempt) {
    auto r = http_->request(ep, method, target, payload, timeout);
    if (!r) {
      // No answer: safe to send again (GETs read, changes carry an op id the agent replays).
      if (attempt < attempts_) {
        std::this_thread::sleep_for(attempt * 500ms);
        continue;
      }
      out.error = what + ": " + r.error().message +
                  (attempts_ > 1 ? " (" + std::to_string(attempts_) + " attempts)" : std::string());
      return out;
    }
    out.status = r->status;
    out.body = json::parse(r->body, nullptr, false);
    if (r->status >= 200 && r->status < 300) {
      if (out.body.is_discarded()) {
        out.error = what + ": answer is not JSON: " + trim_body(r->body);
        return out;
      }
      out.ok = true;
      return out;
    }
    std::string why = out.body.is_object() && out.body.contains("error") && out.body["error"].is_string()
                          ? out.body["error"].get<std::string>()
                          : trim_body(r->body);
    if (out.body.is_object() && out.body.contains("evidence")) out.evidence = out.body["evidence"];
    out.error = what + ": " + std::to_string(r->status) + ": " + why;
    return out;
  }
}

AgentReply AgentClient::health(Millis timeout) const { return call("GET", "/v1/health", nullptr, timeout); }

AgentReply AgentClient::put_manifest(const std::string& yaml) const {
  return call("PUT", "/v1/manifest", json{{"yaml", yaml}}, 30s);
}

AgentReply AgentClient::step_check(const std::string& step, Millis timeout) const {
  return call("GET", "/v1/steps/" + step, nullptr, timeout);
}

AgentReply AgentClient::step_apply(const std::string& step, const std::string& op_id, Millis timeout) const {
  return call("POST", "/v1/steps/" + step + "/apply", json{{"op_id", op_id}}, timeout);
}

AgentReply AgentClient::op_verify(const std::string& op_id, Millis timeout) const {
  return call("POST", "/v1/ops/" + op_id + "/verify", json::object(), timeout);
}

AgentReply AgentClient::op_undo(const std::string& op_id, Millis timeout) const {
  return call("POST", "/v1/ops/" + op_id + "/undo", json::object(), timeout);
}

AgentReply AgentClient::undo_incomplete(Millis timeout) const {
  return call("POST", "/v1/undo-incomplete", json::object(), timeout);
}

AgentReply AgentClient::journal(const std::string& op_id) const {
  return call("GET", op_id.empty() ? "/v1/journal" : "/v1/journal?op_id=" + op_id, nullptr, 30s);
}

AgentReply AgentClient::engine_start(const std::string& op_id) const {
  return call("POST", "/v1/engine/start", json{{"op_id", op_id}}, 30s);
}

AgentReply AgentClient::engine_wait_ready(Millis wait) const {
  return call("POST", "/v1/engine/wait-ready", json{{"timeout_s", std::chrono::duration<double>(wait).count()}}, wait + 15s);
}

AgentReply AgentClient::engine_stop(Millis grace) const {
  return call("POST", "/v1/engine/stop", json{{"grace_s", std::chrono::duration<double>(grace).count()}}, grace + 30s);
}

AgentReply AgentClient::engine_status() const { return call("GET", "/v1/engine", nullptr, 10s); }

AgentReply AgentClient::engine_log(std::size_t lines) const {
  return call("GET", "/v1/engine/log?lines=" + std::to_string(lines), nullptr, 30s);
}

AgentReply AgentClient::deadman_arm(const std::string& op_id) const {
  return call("POST", "/v1/deadman/arm", json{{"op_id", op_id}}, 60s);
}

AgentReply AgentClient::deadman_disarm(const std::string& op_id) const {
  return call("POST", "/v1/deadman/disarm", json{{"op_id", op_id}}, 60s);
}

AgentReply AgentClient::deadman_status() const { return call("GET", "/v1/deadman", nullptr, 10s); }

AgentReply AgentClient::rollback_start(const std::string& op_id, Millis timeout) const {
  return call("POST", "/v1/rollback/start", json{{"op_id", op_id}}, timeout);
}

AgentReply AgentClient::stage_progress() const { return call("GET", "/v1/stage/progress", json(), std::chrono::seconds(5)); }
AgentReply AgentClient::stage_release(const std::vector<std::string>& keep, const std::vector<std::string>& keep_prefixes) const {
  return call("POST", "/v1/stage/release", json{{"keep", keep}, {"keep_prefixes", keep_prefixes}}, std::chrono::minutes(2));
}
AgentReply AgentClient::stage_push_listing(const json& listing) const {
  return call("PUT", "/v1/stage/push/listing", listing, std::chrono::minutes(2));
}
std::unique_ptr<net::KeptConnection> AgentClient::keep_connection() const {
  return std::make_unique<net::KeptConnection>(*http_, net::Endpoint{node_.address, static_cast<std::uint16_t>(node_.agent_port), node_.name});
}
AgentReply AgentClient::gate_run(const std::string& gate, Millis timeout) const {
  return call("POST", "/v1/gates/run", json{{"gate", gate}}, timeout);
}

// The stop step runs every stop command (each bounded by its timeout) and then waits for the
// port to go dark; the call must outlast all of that.
Millis stop_step_timeout(const Manifest& m) {
  Duration total = m.hygiene.port_dark_timeout + 60s;
  for (const auto& c : m.hygiene.stop) total += c.timeout + 10s;
  return std::chrono::duration_cast<Millis>(total);
}

Millis rollback_timeout(const Manifest& m) {
  Duration total = 60s;
  for (const auto& c : m.rollback.commands) total += c.timeout + 10s;
  return std::chrono::duration_cast<Millis>(total);
}

// Hashing a model of hundreds of GB from disk takes minutes; an hour bounds a hung disk.
Millis hashing_timeout() { return std::chrono::duration_cast<Millis>(std::chrono::hours(1)); }
Millis stage_timeout() { return std::chrono::duration_cast<Millis>(std::chrono::hours(6)); }

}  // namespace tandem::ctl
