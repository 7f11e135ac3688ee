// Plan steps that act on one node through its agent: preflight, the dead-man, the outage
// (cron, stop) and the hygiene checklist. Each change is applied, then verified, under one op id.
#include "bind_steps.hpp"
#include "tandem/units.hpp"

namespace tandem::ctl {
namespace {

using namespace std::chrono_literals;

StepOutcome from_reply(const AgentReply& r) {
  if (!r.ok) return StepOutcome::failure(r.error, r.evidence);
  return StepOutcome::success(r.body, r.replayed() ? "(replayed by the agent)" : "");
}

bool rank_running(const json& engine) {
  const std::string phase = engine.value("phase", "idle");
  return phase == "starting" || phase == "ready" || phase == "adopted";
}

}  // namespace

std::string agent_step_name(Action action) {
  switch (action) {
    case Action::hygiene_cron: return "cron";
    case Action::hygiene_shm: return "shm";
    case Action::hygiene_page_cache: return "page_cache";
    case Action::hygiene_cache_dir: return "cache_dir";
    case Action::hygiene_sha256: return "sha";
    case Action::stage_files: return "stage";
    case Action::stage_check:
    case Action::preflight:
    case Action::deadman_arm:
    case Action::stop_command:
    case Action::stop_verify:
    case Action::hashes_compare:
    case Action::engine_start:
    case Action::engine_rendezvous:
    case Action::engine_wait_ready:
    case Action::serve_wait:
    case Action::gate:
    case Action::deadman_disarm:
    case Action::report_write:
    case Action::undo:
    case Action::rollback_command:
    case Action::rollback_verify: return "";
  }
  return "";
}

bool is_stop(Action action) { return action == Action::stop_command || action == Action::stop_verify; }

StepOutcome apply_and_verify(BindContext& ctx, const std::string& node, const std::string& step, const std::string& op,
                             Millis timeout) {
  const AgentClient& a = ctx.agent(node);
  AgentReply applied = a.step_apply(step, op, timeout);
  if (!applied.ok) return StepOutcome::failure(applied.error, applied.evidence);
  AgentReply verified = a.op_verify(op, timeout);
  json ev{{"op_id", op}, {"apply", applied.body.value("evidence", json())}, {"verify", verified.ok ? verified.body.value("evidence", json()) : json()}};
  if (!verified.ok) return StepOutcome::failure(verified.error, ev);
  return StepOutcome::success(ev, applied.replayed() ? "(replayed by the agent)" : "");
}

StepOutcome run_preflight(BindContext& ctx, const Step& s) {
  const AgentClient& a = ctx.agent(s.node);
  AgentReply h = a.health();
  if (!h.ok) return StepOutcome::failure(h.error + "; is tandemd running there and enrolled with this PKI?");
  if (h.body.value("node", "") != s.node)
    return StepOutcome::failure(a.where() + ": the agent says it is node '" + h.body.value("node", "") + "'");
  const json engine = field(h.body, "engine");
  if (rank_running(engine))
    return StepOutcome::failure(a.where() + ": an engine rank is already running there (pid " +
                                    std::to_string(engine.value("pid", -1)) + ", " + engine.value("phase", "") +
                                    "), left by an earlier bind; `tandemctl rollback` stops it",
                                h.body);
  const json dm = field(h.body, "deadman");
  const json current = h.body.value("manifest", json());
  if (dm.value("armed", false) && current.is_object() && current.value("name", "") != ctx.m.name)
    return StepOutcome::failure(a.where() + ": the dead-man is armed for bind '" + current.value("name", "") +
                                "'; disarm or roll that bind back first");
  const json facts = field(h.body, "facts");
  const json ports = facts.value("listening_tcp_ports", json::array());
  for (const auto& p : ports)
    if (p == ctx.m.engine.rendezvous.port)
      return StepOutcome::failure(a.where() + ": the rendezvous port " + std::to_string(ctx.m.engine.rendezvous.port) +
                                      " is already in use there",
                                  facts);
  AgentReply put = a.put_manifest(ctx.manifest_yaml);
  if (!put.ok) return StepOutcome::failure(put.error, put.evidence);
  json ev{{"agent", {{"version", h.body.value("version", "")}, {"root", h.body.value("root", "")}}},
          {"manifest_sha256", put.body.value("sha256", "")},
          {"facts", facts},
          {"engine", engine}};
  std::string note = "agent " + h.body.value("version", "?");
  if (auto mem = facts.value("mem_available_bytes", json()); mem.is_number())
    note += ", MemAvailable " + std::to_string(mem.get<long long>() >> 20) + " MiB";
  return StepOutcome::success(ev, note);
}

StepOutcome run_deadman_arm(BindContext& ctx, const Step& s) {
  StepOutcome o = from_reply(ctx.agent(s.node).deadman_arm(ctx.op_for_step(s.index)));
  if (o.ok) o.note = "fires in " + std::to_string(field(o.evidence, "deadman").value("seconds_left", 0LL)) + " s " + o.note;
  return o;
}

StepOutcome run_deadman_disarm(BindContext& ctx, const Step& s) {
  if (auto dead = dead_rank(ctx)) return *dead;
  StepOutcome o = from_reply(ctx.agent(s.node).deadman_disarm(ctx.op_for_step(s.index)));
  if (!o.ok || !ctx.m.stage) return o;
  // The bind is good: the backups earlier binds' stages kept on this node are freed, so the state
  // dir does not grow with every bind. This bind's own stay, for `tandemctl rollback` of it, and so
  // do those of `tandemctl stage` runs (ops "stage-..."): they may have carried this bind's files
  // ahead of it, and the old lane may need the files they replaced back (--release-backups frees them).
  std::vector<std::string> keep;
  for (const auto& st : ctx.plan.steps)
    if (st.node == s.node && st.action == Action::stage_files) keep.push_back(ctx.op_for_step(st.index));
  AgentReply r = ctx.agent(s.node).stage_release(keep, {"stage-"});
  if (!r.ok) {
    o.note += " (older stage backups not freed: " + r.error + ")";
    return o;
  }
  const json rel = field(r.body, "evidence").empty() ? r.body : field(r.body, "evidence");
  o.evidence["stage_release"] = rel;
  if (!rel.value("released", json::array()).empty())
    o.note += " " + std::to_string(rel["released"].size()) + " older stage backups freed (" +
              format_size(rel.value("freed_bytes", 0ull)) + ")";
  return o;
}

// The agent's "stop" step runs all of this node's stop commands, then waits for the port to go
// dark. Plan step "stop.command" k applies it (once: later ones replay) and shows command k;
// "stop.verify" applies it when the node has no stop commands, then verifies.
StepOutcome run_stop(BindContext& ctx, const Step& s) {
  const std::string op = ctx.op_for(s.node, "stop");
  const AgentClient& a = ctx.agent(s.node);
  AgentReply applied = a.step_apply("stop", op, stop_step_timeout(ctx.m));
  if (!applied.ok) return StepOutcome::failure(applied.error, applied.evidence);
  const json ev = field(applied.body, "evidence");
  if (s.action == Action::stop_command) {
    int k = 0;
    for (const auto& other : ctx.plan.steps) {
      if (other.index == s.index) break;
      if (other.node == s.node && other.action == Action::stop_command) ++k;
    }
    const json cmds = ev.value("commands", json::array());
    json mine = k < static_cast<int>(cmds.size()) ? cmds[static_cast<size_t>(k)] : json();
    std::string note = mine.is_object() ? "exit " + std::to_string(mine.value("exit_code", -1)) : "";
    return StepOutcome::success({{"op_id", op}, {"command", mine}}, note);
  }
  AgentReply verified = a.op_verify(op, stop_step_timeout(ctx.m));
  json out{{"op_id", op}, {"apply", ev}, {"verify", verified.ok ? verified.body.value("evidence", json()) : json()}};
  if (!verified.ok) return StepOutcome::failure(verified.error, out);
  const json port = field(ev, "port");
  return StepOutcome::success(out, "port " + std::to_string(port.value("port", 0)) +
                                       (port.value("dark", false) ? " dark" : " NOT dark"));
}

StepOutcome run_hygiene(BindContext& ctx, const Step& s) {
  const std::string step = agent_step_name(s.action);
  const Millis timeout = step == "sha" ? hashing_timeout() : step == "page_cache" ? Millis(10min) : Millis(2min);
  StepOutcome o = apply_and_verify(ctx, s.node, step, ctx.op_for_step(s.index), timeout);
  if (!o.ok && step == "sha" && o.evidence.is_object() && o.evidence.contains("pins")) {
    // A pin mismatch: name the files and both digests, not just a count.
    for (const auto& p : o.evidence["pins"])
      if (!p.value("ok", true))
        o.error += "; " + p.value("path", "") + " is " + p.value("actual", "").substr(0, 12) + ", pinned " +
                   p.value("expected", "").substr(0, 12);
  }
  if (!o.ok) return o;
  const json ev = field(o.evidence, "apply");
  if (step == "sha")
    o.note = std::to_string(field(ev, "files").size()) + " files, " +
             std::to_string(ev.value("total_bytes", 0LL) >> 20) + " MiB " + o.note;
  else if (step == "cron")
    o.note = std::to_string(ev.value("lines_disabled", 0)) + " cron lines disabled " + o.note;
  else if (step == "shm")
    o.note = std::to_string(ev.value("count", 0)) + " files, " + std::to_string(ev.value("bytes_freed", 0LL)) + " bytes freed " + o.note;
  return o;
}

}  // namespace tandem::ctl
