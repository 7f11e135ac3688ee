// tandemd's state: which node it is, the manifest the controller sent (validated with the same
// parser as tandemctl, stored in the state dir so a restart keeps it), and the three things that
// act on the node: the hygiene core (journaled steps), the rank supervisor and the dead-man.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "tandem/agent/agent_core.hpp"
#include "tandem/agent/pushed_source.hpp"
#include "tandem/manifest.hpp"
#include "tandem/supervise/deadman.hpp"
#include "tandem/supervise/rank_supervisor.hpp"

namespace tandem::agentd {

struct DaemonOptions {
  std::string node;                 // this node's name; must match the certificate CN
  std::string root = "/";           // host paths resolve under this prefix
  std::string state_dir_host = "/var/lib/tandemd";  // as the node sees it (under root)
  std::string state_dir;            // the real path (root + state_dir_host): manifest, journal, rank, dead-man
  std::set<std::string> allow_exec;  // executables a manifest may name (engine, stop, rollback)
  std::string tandemd_path;          // what a systemd dead-man timer runs
  std::string pki_dir = "/etc/tandem/pki";  // this node's certificate, also its client side (stage pulls)
};

// An operation's outcome for the HTTP layer: a status code and a JSON body.
struct Outcome {
  unsigned status = 200;
  nlohmann::json body;
  static Outcome ok(nlohmann::json body) { return {200, std::move(body)}; }
  static Outcome fail(unsigned status, std::string message, nlohmann::json evidence = nullptr);
};

class Daemon {
 public:
  static std::unique_ptr<Daemon> open(DaemonOptions opts, std::string& error);

  Outcome health();
  Outcome put_manifest(const std::string& yaml);
  Outcome step_check(const std::string& step);
  Outcome step_apply(const std::string& step, const std::string& op_id);
  Outcome op_verify(const std::string& op_id);
  Outcome op_undo(const std::string& op_id);
  Outcome undo_incomplete();
  // Frees the backups of verified stage ops other than `keep` (AgentCore::release_stage).
  Outcome stage_release(const std::vector<std::string>& keep, const std::vector<std::string>& keep_prefixes);
  Outcome journal(const std::string& op_id);
  Outcome engine_start(const std::string& op_id);
  Outcome engine_wait_ready(double timeout_s);
  Outcome engine_stop(double grace_s);
  Outcome engine_status();
  Outcome engine_log(std::size_t lines);
  Outcome deadman_arm(const std::string& op_id);
  Outcome deadman_disarm(const std::string& op_id);
  Outcome deadman_status();
  // Start this node's share of the rollback lane (the manifest's rollback commands selected for
  // it), each to completion or its timeout. When the dead-man already fired, it ran them: its
  // outcomes are returned instead of running them twice.
  Outcome rollback_start(const std::string& op_id);
  // Run a command gate (gates.custom[].command) of the manifest this agent holds, by name, when it
  // selects this node: the declared argv, no shell, bounded by its timeout, the last 8 KiB of
  // output kept. The caller judges the outcome; a gate that ran is 200 whatever its exit code.
  Outcome gate_run(const std::string& gate);

  // Stage source (stage_serve.cpp): this node's copies of the staged paths, for `client_cn`, which
  // must be another node of the manifest (or the controller). Not under mu_: a long step here must
  // not stall a worker's pull.
  Outcome stage_source_list(const std::string& client_cn);
  // On 200, `bytes` holds the chunk.
  Outcome stage_source_chunk(const std::string& client_cn, const agent::SourceFile& f, std::uint64_t offset,
                             std::uint64_t length, std::string& bytes);
  // The running stage's bytes and files (what tandemctl shows as progress); not under mu_.
  Outcome stage_progress() const;

  // stage.from: controller (pushed_source.hpp): the controller's listing, the chunks this node's
  // stage asks for and their bytes. Not under mu_: the stage's apply holds it while it waits.
  Outcome stage_push_listing(const nlohmann::json& listing);
  Outcome stage_push_take(std::chrono::milliseconds wait);
  Outcome stage_push_chunk(std::uint64_t id, std::string bytes);
  Outcome stage_push_fail(std::uint64_t id, const std::string& why);

  const DaemonOptions& options() const { return opts_; }

 private:
  explicit Daemon(DaemonOptions opts) : opts_(std::move(opts)) {}
  std::optional<Outcome> load_manifest_locked(const std::string& yaml, const std::string& origin);
  std::optional<Outcome> need_manifest() const;
  const Node& self() const;
  // An operation already recorded under `op_id` (retry): its recorded response.
  std::optional<Outcome> replay(const std::string& op_id, const std::string& step);
  // The hygiene core; for step "stage" with a source (the head's agent) and the live progress.
  Result<std::unique_ptr<agent::AgentCore>> core_for(const std::string& step);
  // The manifest as stage_source_* see it, checked against the client's CN and this node's role.
  std::variant<std::shared_ptr<const Manifest>, Outcome> source_manifest(const std::string& client_cn) const;
  std::shared_ptr<agent::LocalStageSource> local_source(const Manifest& m) const;
  void record(const std::string& op_id, const std::string& step, const Outcome& o);

  DaemonOptions opts_;
  std::mutex mu_;
  std::optional<Manifest> manifest_;
  std::string manifest_sha256_;
  std::unique_ptr<agent::AgentCore> core_;
  std::unique_ptr<supervise::RankSupervisor> rank_;
  std::unique_ptr<supervise::Deadman> deadman_;
  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const Manifest> snapshot_;  // manifest_ for readers that must not wait on mu_
  std::shared_ptr<agent::StageProgress> stage_progress_ = std::make_shared<agent::StageProgress>();
  std::shared_ptr<agent::PushedStageSource> pushed_ = std::make_shared<agent::PushedStageSource>();
};

}  // namespace tandem::agentd
