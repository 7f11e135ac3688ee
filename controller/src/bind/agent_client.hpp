// A typed client for one node's tandemd: every endpoint of agent/src/routes.cpp, over mutual TLS
// (the agent's certificate must carry CN = node name). Each call has its own timeout, and every
// error names the node, the endpoint and why ("rank1 (127.0.0.2:17443) POST /v1/steps/cron/apply:
// 422: ..."). Calls that change a node carry an op id: the agent records the result under it and
// replays it for a repeated id, so a call lost in transit is simply sent again.
#pragma once
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/manifest.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"
#include "tandem/result.hpp"

namespace tandem::ctl {

using nlohmann::json;
using Millis = std::chrono::milliseconds;

// One call's outcome. A failure is a value like any other: `error` names node, endpoint and why.
struct AgentReply {
  bool ok = false;
  unsigned status = 0;  // 0: no HTTP answer (transport error)
  json body;            // on 2xx: the agent's answer
  std::string error;    // on failure: node + endpoint + why
  json evidence;        // on failure: the agent's evidence, if any
  bool replayed() const { return ok && body.is_object() && body.value("replayed", false); }
};

class AgentClient {
 public:
  // `pki_dir` as made by `tandemctl pki init`: ca.pem, controller.pem/.key.
  static Result<AgentClient> create(const std::filesystem::path& pki_dir, const Node& node);

  const Node& node() const { return node_; }
  std::string where() const;  // "rank1 (127.0.0.2:17443)"

  AgentReply health(Millis timeout = std::chrono::seconds(10)) const;
  AgentReply put_manifest(const std::string& yaml) const;
  AgentReply step_check(const std::string& step, Millis timeout) const;
  AgentReply step_apply(const std::string& step, const std::string& op_id, Millis timeout) const;
  AgentReply op_verify(const std::string& op_id, Millis timeout) const;
  AgentReply op_undo(const std::string& op_id, Millis timeout) const;
  AgentReply undo_incomplete(Millis timeout) const;
  AgentReply journal(const std::string& op_id = {}) const;
  AgentReply engine_start(const std::string& op_id) const;
  AgentReply engine_wait_ready(Millis wait) const;  // the HTTP timeout is `wait` plus a margin
  AgentReply engine_stop(Millis grace) const;
  AgentReply engine_status() const;
  AgentReply engine_log(std::size_t lines) const;
  AgentReply deadman_arm(const std::string& op_id) const;
  AgentReply deadman_disarm(const std::string& op_id) const;
  AgentReply deadman_status() const;
  AgentReply rollback_start(const std::string& op_id, Millis timeout) const;
  AgentReply stage_progress() const;
  // Frees the backups of the node's verified stage ops other than `keep` and those whose id starts
  // with one of `keep_prefixes` (POST /v1/stage/release).
  AgentReply stage_release(const std::vector<std::string>& keep, const std::vector<std::string>& keep_prefixes = {}) const;
  // stage.from: controller: this machine's listing, sent before the node's check and apply.
  AgentReply stage_push_listing(const json& listing) const;
  // A connection of its own for a pusher thread (stage_push.hpp): chunks follow each other on one
  // TLS session. It must not outlive this client.
  std::unique_ptr<net::KeptConnection> keep_connection() const;
  // A command gate of the manifest the agent holds, by name: {"outcome": {exit_code, output_tail, ...}}.
  AgentReply gate_run(const std::string& gate, Millis timeout) const;

  // Transport failures (no HTTP answer) are retried this many times in all, with a short pause;
  // an HTTP answer, even 5xx, is never retried here (the caller decides).
  void set_attempts(int n) { attempts_ = n; }

 private:
  AgentClient(net::HttpsClient http, Node node) : http_(std::make_shared<net::HttpsClient>(std::move(http))), node_(std::move(node)) {}
  AgentReply call(const std::string& method, const std::string& target, const json& body, Millis timeout) const;

  std::shared_ptr<net::HttpsClient> http_;
  Node node_;
  int attempts_ = 3;
};

// Timeouts derived from the manifest, so a call never gives up before the agent would.
Millis stop_step_timeout(const Manifest& m);
Millis rollback_timeout(const Manifest& m);
Millis hashing_timeout();
Millis stage_timeout();  // a stage of tens of GB over a slow link

}  // namespace tandem::ctl
