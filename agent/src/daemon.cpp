#include "daemon.hpp"

#include <unistd.h>

#include <sys/stat.h>

#include "node_facts.hpp"
#include "restore.hpp"
#include "tandem/agent/sha256.hpp"
#include "tandem/serve_args.hpp"
#include "tandem/supervise/atomic_file.hpp"
#include "tandem/supervise/deadman_fire.hpp"
#include "tandem/build_info.hpp"
#include "tandem/names.hpp"

namespace tandem::agentd {
namespace {

using nlohmann::json;

std::string msg(const Error& e) { return e.text(); }

json rank_json(const supervise::RankStatus& s) {
  json j{{"phase", supervise::to_string(s.phase)}, {"pid", s.pid}, {"log", s.log_path},
         {"stop_requested", s.stop_requested}};
  if (s.exit) j["exit"] = s.exit->str();
  return j;
}

json outcome_json(const supervise::CommandOutcome& o) {
  return {{"argv", o.argv},           {"status", o.status}, {"exit_code", o.exit_code}, {"timed_out", o.timed_out},
          {"output_tail", o.output_tail}, {"error", o.error},  {"elapsed_ms", o.elapsed_ms}};
}

json deadman_json(const supervise::DeadmanStatus& s) {
  json outcomes = json::array();
  for (const auto& o : s.outcomes) outcomes.push_back(outcome_json(o));
  return {{"armed", s.armed},       {"seconds_left", s.seconds_left}, {"backend", to_string(s.backend)},
          {"fired", s.fired},       {"fire_complete", s.fire_complete}, {"fired_by", s.fired_by},
          {"fired_at_ms", s.fired_at_ms}, {"timer_rearms", s.timer_rearms},
          {"outcomes", outcomes},   {"detail", s.detail}};
}

// A dead-man unit name from the bind name: letters, digits and '-' only.
std::string unit_safe(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return out.empty() ? "bind" : out;
}

}  // namespace

Outcome Outcome::fail(unsigned status, std::string message, json evidence) {
  json body{{"error", std::move(message)}};
  if (!evidence.is_null()) body["evidence"] = std::move(evidence);
  return {status, std::move(body)};
}

std::unique_ptr<Daemon> Daemon::open(DaemonOptions opts, std::string& error) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(opts)));
  if (auto st = supervise::make_dirs(d->opts_.state_dir, 0700); !st) {
    error = msg(st.error());
    return nullptr;
  }
  auto rank = supervise::RankSupervisor::open(d->opts_.state_dir + "/rank");
  if (!rank) {
    error = "rank supervisor: " + msg(rank.error());
    return nullptr;
  }
  d->rank_ = std::move(rank.value());
  // A manifest accepted before a restart is still in force.
  auto stored = supervise::read_file_if_exists(d->opts_.state_dir + "/manifest.yaml");
  if (!stored) {
    error = msg(stored.error());
    return nullptr;
  }
  if (stored.value()) {
    std::lock_guard lock(d->mu_);
    if (auto bad = d->load_manifest_locked(*stored.value(), d->opts_.state_dir + "/manifest.yaml")) {
      error = "stored manifest: " + bad->body.dump();
      return nullptr;
    }
  }
  return d;
}

const Node& Daemon::self() const {
  for (const auto& n : manifest_->nodes)
    if (n.name == opts_.node) return n;
  return manifest_->nodes.front();  // load_manifest_locked guarantees the node exists
}

std::optional<Outcome> Daemon::need_manifest() const {
  if (!manifest_) return Outcome::fail(409, "no manifest yet: PUT /v1/manifest first");
  return std::nullopt;
}

std::optional<Outcome> Daemon::load_manifest_locked(const std::string& yaml, const std::string& origin) {
  auto r = load_manifest_text(yaml, origin);
  if (!r.manifest) {
    json errs = json::array();
    for (const auto& d : r.errors) errs.push_back(d.str());
    return Outcome::fail(400, "the manifest is not valid", json{{"errors", errs}});
  }
  Manifest& m = *r.manifest;
  const Node* me = nullptr;
  for (const auto& n : m.nodes)
    if (n.name == opts_.node) me = &n;
  if (!me) return Outcome::fail(400, "the manifest has no node named '" + opts_.node + "' (this agent)");
  if (me->root != opts_.root)
    return Outcome::fail(400, "the manifest puts node '" + opts_.node + "' at root " + me->root + " but this agent serves root " +
                                  opts_.root);
  // Only executables this node's operator allowed at enrolment may be named by a manifest.
  json refused = json::array();
  auto check = [&](const std::string& path) {
    if (!opts_.allow_exec.count(path)) refused.push_back(path);
  };
  check(m.engine.binary);
  for (const auto& c : m.hygiene.stop)
    if (m.selects(c, *me)) check(c.run.front());
  for (const auto& c : m.rollback.commands)
    if (m.selects(c, *me)) check(c.run.front());
  for (const auto& g : m.gates.custom)
    if (g.kind == CustomGate::Kind::command && m.selects(g.command, *me)) check(g.command.run.front());
  if (!refused.empty())
    return Outcome::fail(403, "the manifest names executables this agent is not allowed to run (start tandemd with "
                              "--allow-exec PATH for each)", json{{"refused", refused}});
  if (manifest_ && deadman_) {
    auto st = deadman_->status();
    if (st && st.value().armed && m.name != manifest_->name)
      return Outcome::fail(409, "the dead-man is armed for bind '" + manifest_->name + "'; disarm it before sending bind '" +
                                    m.name + "'");
  }
  supervise::DeadmanOptions dopt;
  dopt.state_dir = opts_.state_dir + "/deadman/" + unit_safe(m.name);
  dopt.bind = unit_safe(m.name);
  dopt.backend = m.deadman.backend;
  dopt.tandemd_path = opts_.tandemd_path;
  auto dm = supervise::Deadman::open(dopt);
  if (!dm) return Outcome::fail(500, "dead-man: " + msg(dm.error()));
  deadman_ = std::move(dm.value());
  manifest_ = std::move(m);
  {
    std::lock_guard snap(snapshot_mu_);
    snapshot_ = std::make_shared<const Manifest>(*manifest_);
  }
  manifest_sha256_ = agent::sha256_hex(yaml);
  core_.reset();
  return std::nullopt;
}

Outcome Daemon::put_manifest(const std::string& yaml) {
  std::lock_guard lock(mu_);
  if (auto bad = load_manifest_locked(yaml, "manifest from " + opts_.node + "'s controller")) return *bad;
  if (auto st = supervise::write_file_atomic(opts_.state_dir + "/manifest.yaml", yaml, 0600); !st)
    return Outcome::fail(500, msg(st.error()));
  return Outcome::ok({{"accepted", true}, {"name", manifest_->name}, {"sha256", manifest_sha256_}});
}

Outcome Daemon::health() {
  std::lock_guard lock(mu_);
  // pid: enrolment checks that the agent answering is the one it just started, not an old one
  // still holding the port.
  json j{{"node", opts_.node}, {"version", tandem::version()}, {"root", opts_.root}, {"pid", ::getpid()}};
  j["manifest"] = manifest_ ? json{{"name", manifest_->name}, {"sha256", manifest_sha256_}} : json(nullptr);
  const std::string cache = manifest_ ? manifest_->engine.cache_dir : std::string();
  j["facts"] = node_facts(opts_.root, opts_.state_dir, cache);
  j["engine"] = rank_json(rank_->status());
  if (deadman_) {
    auto st = deadman_->status();
    j["deadman"] = st ? deadman_json(st.value()) : json{{"error", msg(st.error())}};
  }
  return Outcome::ok(j);
}

// The hygiene core is reopened for each request: `tandemd restore` (run by the dead-man, maybe
// from systemd) appends to the same journal, and a fresh replay always sees the truth on disk.
#define TANDEM_WITH_CORE(core, step_name)                                                       \
  std::lock_guard lock(mu_);                                                                    \
  if (auto missing = need_manifest()) return *missing;                                          \
  auto core##_r = core_for(step_name);                                                          \
  if (!core##_r) return Outcome::fail(500, msg(core##_r.error()));                              \
  agent::AgentCore& core = *core##_r.value()

namespace {
Outcome from(const Result<json>& r, unsigned fail_status = 422) {
  if (r) return Outcome::ok(r.value());
  return Outcome::fail(fail_status, r.error().text(), agent::evidence(r.error()));
}
}  // namespace

Outcome Daemon::step_check(const std::string& step) {
  TANDEM_WITH_CORE(core, step);
  if (!core.step(step)) return Outcome::fail(404, "no step '" + step + "'; steps: cron, stop, shm, page_cache, cache_dir, sha, stage (with a stage section)");
  return from(core.check(step));
}

Outcome Daemon::step_apply(const std::string& step, const std::string& op_id) {
  TANDEM_WITH_CORE(core, step);
  if (!core.step(step)) return Outcome::fail(404, "no step '" + step + "'; steps: cron, stop, shm, page_cache, cache_dir, sha, stage (with a stage section)");
  if (!agent::valid_op_id(op_id)) return Outcome::fail(400, "op_id '" + op_id + "' is not valid ([A-Za-z0-9._-], 1..64)");
  return from(core.apply(step, op_id));
}

Outcome Daemon::op_verify(const std::string& op_id) {
  TANDEM_WITH_CORE(core, "");
  return from(core.verify(op_id));
}

Outcome Daemon::op_undo(const std::string& op_id) {
  TANDEM_WITH_CORE(core, "");
  return from(core.undo(op_id));
}

Outcome Daemon::undo_incomplete() {
  TANDEM_WITH_CORE(core, "");
  return from(core.undo_incomplete());
}

Outcome Daemon::stage_release(const std::vector<std::string>& keep, const std::vector<std::string>& keep_prefixes) {
  TANDEM_WITH_CORE(core, "");
  return from(core.release_stage(keep, keep_prefixes));
}

Outcome Daemon::journal(const std::string& op_id) {
  TANDEM_WITH_CORE(core, "");
  json out = json::array();
  for (const auto& r : op_id.empty() ? core.journal().records() : core.journal().records_for(op_id))
    out.push_back(r.to_json());
  return Outcome::ok({{"records", out}, {"warnings", core.journal().warnings()}});
}

std::optional<Outcome> Daemon::replay(const std::string& op_id, const std::string& step) {
  auto core = open_core(*manifest_, opts_);
  if (!core) return std::nullopt;
  auto rec = core.value()->journal().last(op_id, agent::Phase::applied);
  if (!rec || rec->step != step) return std::nullopt;
  json body = rec->data;
  body["replayed"] = true;
  return Outcome::ok(body);
}

void Daemon::record(const std::string& op_id, const std::string& step, const Outcome& o) {
  if (o.status != 200) return;
  auto core = open_core(*manifest_, opts_);
  if (core) (void)core.value()->journal().append(op_id, step, agent::Phase::applied, o.body);
}

Outcome Daemon::engine_start(const std::string& op_id) {
  std::lock_guard lock(mu_);
  if (auto missing = need_manifest()) return *missing;
  if (!agent::valid_op_id(op_id)) return Outcome::fail(400, "op_id '" + op_id + "' is not valid ([A-Za-z0-9._-], 1..64)");
  if (auto again = replay(op_id, "engine.start")) return *again;
  // Sandboxed nodes run the engine on the files under their root, the same files the sha step hashed.
  Manifest rooted = rebase_engine_paths(*manifest_, opts_.root);
  auto spec = supervise::RankSpec::from_manifest(rooted, self(), opts_.state_dir + "/engine.log");
  auto st = rank_->start(spec);
  if (!st) return Outcome::fail(409, msg(st.error()));
  Outcome o = Outcome::ok({{"engine", rank_json(st.value())}, {"argv", spec.argv}});
  record(op_id, "engine.start", o);
  return o;
}

Outcome Daemon::engine_wait_ready(double timeout_s) {
  // Not under mu_: waiting must not block health or stop requests.
  auto st = rank_->wait_ready(std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));
  if (!st) return Outcome::fail(504, msg(st.error()), json{{"engine", rank_json(rank_->status())}});
  return Outcome::ok({{"engine", rank_json(st.value())}});
}

Outcome Daemon::engine_stop(double grace_s) {
  auto st = rank_->stop(std::chrono::milliseconds(static_cast<long long>(grace_s * 1000)));
  if (!st) return Outcome::fail(500, msg(st.error()));
  return Outcome::ok({{"engine", rank_json(st.value())}});
}

Outcome Daemon::engine_status() { return Outcome::ok({{"engine", rank_json(rank_->status())}}); }

Outcome Daemon::engine_log(std::size_t lines) {
  auto t = rank_->tail(lines);
  if (!t) return Outcome::fail(404, msg(t.error()));
  return Outcome::ok({{"lines", t.value()}});
}

Outcome Daemon::deadman_arm(const std::string& op_id) {
  std::lock_guard lock(mu_);
  if (auto missing = need_manifest()) return *missing;
  if (!agent::valid_op_id(op_id)) return Outcome::fail(400, "op_id '" + op_id + "' is not valid ([A-Za-z0-9._-], 1..64)");
  if (auto again = replay(op_id, "deadman.arm")) return *again;
  // Firing first stops the new rank and undoes this node's hygiene (crontabs back byte for byte),
  // then starts the old lane: the same order as an operator's rollback.
  std::vector<Command> commands{restore_command(opts_)};
  for (const auto& c : manifest_->rollback.commands)
    if (manifest_->selects(c, self())) commands.push_back(c);
  auto st = deadman_->arm(manifest_->deadman.delay, commands);
  if (!st) return Outcome::fail(409, msg(st.error()));
  Outcome o = Outcome::ok({{"deadman", deadman_json(st.value())}});
  record(op_id, "deadman.arm", o);
  return o;
}

Outcome Daemon::deadman_disarm(const std::string& op_id) {
  std::lock_guard lock(mu_);
  if (auto missing = need_manifest()) return *missing;
  if (!agent::valid_op_id(op_id)) return Outcome::fail(400, "op_id '" + op_id + "' is not valid ([A-Za-z0-9._-], 1..64)");
  if (auto again = replay(op_id, "deadman.disarm")) return *again;
  auto st = deadman_->disarm();
  if (!st) return Outcome::fail(409, msg(st.error()));
  Outcome o = Outcome::ok({{"deadman", deadman_json(st.value())}});
  record(op_id, "deadman.disarm", o);
  return o;
}

Outcome Daemon::deadman_status() {
  std::lock_guard lock(mu_);
  if (auto missing = need_manifest()) return *missing;
  auto st = deadman_->status();
  if (!st) return Outcome::fail(500, msg(st.error()));
  return Outcome::ok({{"deadman", deadman_json(st.value())}});
}

Outcome Daemon::rollback_start(const std::string& op_id) {
  std::lock_guard lock(mu_);
  if (auto missing = need_manifest()) return *missing;
  if (!agent::valid_op_id(op_id)) return Outcome::fail(400, "op_id '" + op_id + "' is not valid ([A-Za-z0-9._-], 1..64)");
  if (auto again = replay(op_id, "rollback.start")) return *again;
  auto dm = deadman_->status();
  if (dm && dm.value().fired) {
    // Never start the old lane twice: the dead-man's run is the rollback.
    json outcomes = json::array();
    for (const auto& o : dm.value().outcomes) outcomes.push_back(outcome_json(o));
    return Outcome::ok({{"outcomes", outcomes}, {"ran_by", "dead-man (fired by " + dm.value().fired_by + ")"},
                        {"complete", dm.value().fire_complete}});
  }
  json outcomes = json::array();
  bool all_ok = true;
  for (const auto& c : manifest_->rollback.commands) {
    if (!manifest_->selects(c, self())) continue;
    auto o = supervise::run_rollback_command(c, std::chrono::seconds(5));
    all_ok = all_ok && o.error.empty() && o.exit_code == 0 && !o.timed_out;
    outcomes.push_back(outcome_json(o));
  }
  if (!all_ok) return Outcome::fail(422, "a rollback command failed on " + opts_.node, json{{"outcomes", outcomes}});
  Outcome o = Outcome::ok({{"outcomes", outcomes}, {"ran_by", "tandemd"}, {"complete", true}});
  record(op_id, "rollback.start", o);
  return o;
}

Outcome Daemon::gate_run(const std::string& gate) {
  Command c;
  {
    std::lock_guard lock(mu_);
    if (auto missing = need_manifest()) return *missing;
    const CustomGate* found = nullptr;
    for (const auto& g : manifest_->gates.custom)
      if (g.name == gate && g.kind == CustomGate::Kind::command) found = &g;
    if (!found) return Outcome::fail(404, "the manifest has no command gate named '" + printable(gate) + "'");
    if (!manifest_->selects(found->command, self()))
      return Outcome::fail(409, "command gate '" + gate + "' runs on '" + found->command.on + "', not on " + opts_.node);
    c = found->command;
  }
  // Outside the lock: a gate may take its whole timeout, and health must still answer meanwhile.
  // The same runner as the rollback commands: argv only, own process group, output capped.
  return Outcome::ok({{"gate", gate}, {"outcome", outcome_json(supervise::run_rollback_command(c, std::chrono::seconds(5)))}});
}

}  // namespace tandem::agentd
