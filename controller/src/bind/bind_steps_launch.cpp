// Plan steps from the hash comparison to a serving head: start the ranks (workers first), wait
// for each to be ready, bound the rendezvous, and wait for /health. A rank that exits while we
// wait fails the step at once, with its log tail as evidence; rollback then stops the others.
#include <thread>

#include "bind_steps.hpp"
#include "hash_compare.hpp"
#include "http_get.hpp"
#include "tandem/url.hpp"

namespace tandem::ctl {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A rank this bind started is gone when it exited, or when a restarted agent found no rank
// (idle: its predecessor's rank died while no agent watched).
bool gone(const json& engine) {
  const std::string phase = engine.value("phase", "");
  return phase == "exited" || phase == "idle";
}

Millis rendezvous_timeout(const Manifest& m) { return std::chrono::duration_cast<Millis>(m.engine.rendezvous.timeout); }

// tandem-serve's start-up phases from a rank's /health (null when it says none: another engine).
json startup_phases(const std::string& health_body) {
  const json body = json::parse(health_body, nullptr, false);
  if (body.is_object() && body.contains("startup") && body["startup"].is_object()) return body["startup"];
  return nullptr;
}

// Every rank's start-up phases, by node, once the head serves: the workers' from their own
// /health on the fabric address (the agent's readiness probe does not carry them).
json all_startup_phases(const BindContext& ctx, const std::string& head_body) {
  json out = json::object();
  for (const Node* n : ctx.m.start_order()) {
    if (n->role == Role::head) {
      if (json p = startup_phases(head_body); !p.is_null()) out[n->name] = p;
      continue;
    }
    auto r = http_get("http://" + n->fabric_address + ":" + std::to_string(ctx.m.engine.serve.port) + "/health", 5s);
    if (r && r->status == 200)
      if (json p = startup_phases(r->body); !p.is_null()) out[n->name] = p;
  }
  return out;
}

}  // namespace

std::optional<StepOutcome> dead_rank(const BindContext& ctx) {
  for (const auto& s : ctx.plan.steps) {
    if (s.action != Action::engine_start) continue;
    auto it = ctx.run.steps.find(s.index);
    if (it == ctx.run.steps.end() || !it->second.done) continue;
    AgentReply st = ctx.agent(s.node).engine_status();
    if (!st.ok) return StepOutcome::failure(st.error);
    const json e = field(st.body, "engine");
    if (gone(e))
      return StepOutcome::failure(s.node + ": the engine rank " + (e.value("phase", "") == "idle" ? "is gone" : "exited") + " (" +
                                      e.value("exit", std::string("?")) +
                                      "); last log lines:\n" + log_tail(ctx, s.node),
                                  json{{"engine", e}});
  }
  return std::nullopt;
}

std::string head_url(const Manifest& m) {
  return http_base_url(m.head().address, static_cast<std::uint16_t>(m.engine.serve.port));
}

std::string log_tail(const BindContext& ctx, const std::string& node, std::size_t lines) {
  AgentReply r = ctx.agent(node).engine_log(lines);
  if (!r.ok) return "(no log: " + r.error + ")";
  std::string out;
  for (const auto& l : r.body.value("lines", json::array())) out += "    " + l.get<std::string>() + "\n";
  return out;
}

StepOutcome run_hash_compare(BindContext& ctx, const Step&) {
  std::map<std::string, json> by_node;
  for (const auto& s : ctx.plan.steps) {
    if (s.action != Action::hygiene_sha256) continue;
    auto it = ctx.run.steps.find(s.index);
    if (it == ctx.run.steps.end() || !it->second.done)
      return StepOutcome::failure("no hashes from " + s.node + " (step " + std::to_string(s.index) + " is not done)");
    by_node[s.node] = field(it->second.evidence, "apply");
  }
  HashComparison c = compare_hashes(by_node);
  if (!c.ok) return StepOutcome::failure("refusing to launch: " + c.summary(), c.to_json());
  return StepOutcome::success(c.to_json(), c.summary());
}

StepOutcome run_engine_start(BindContext& ctx, const Step& s) {
  AgentReply r = ctx.agent(s.node).engine_start(ctx.op_for_step(s.index));
  if (!r.ok) return StepOutcome::failure(r.error, r.evidence);
  const json e = field(r.body, "engine");
  return StepOutcome::success(r.body, "pid " + std::to_string(e.value("pid", -1)) + (r.replayed() ? " (replayed)" : ""));
}

StepOutcome run_engine_wait_ready(BindContext& ctx, const Step& s) {
  ctx.progress.note(s.node, "waiting up to " + format_duration(ctx.m.engine.rendezvous.timeout) + " for the rank to be ready");
  AgentReply r = ctx.agent(s.node).engine_wait_ready(rendezvous_timeout(ctx.m));
  if (!r.ok) return StepOutcome::failure(r.error + "; last log lines:\n" + log_tail(ctx, s.node), r.evidence);
  return StepOutcome::success(r.body, "ready");
}

// The head's port opens once the rendezvous is done and the model is loaded. The engine bounds
// its own rendezvous (--rendezvous-timeout: it exits when the other ranks do not come), so ranks
// still alive after that bound have met; a slower model load is then serve.wait's business.
StepOutcome run_rendezvous(BindContext& ctx, const Step& s) {
  ctx.progress.note(s.node, "ranks meeting (bounded by " + format_duration(ctx.m.engine.rendezvous.timeout) + ")");
  AgentReply r = ctx.agent(s.node).engine_wait_ready(rendezvous_timeout(ctx.m));
  if (auto dead = dead_rank(ctx)) return *dead;
  if (r.ok) return StepOutcome::success(r.body, "head ready");
  if (r.status == 504 && field(r.evidence, "engine").value("phase", "") == "starting")
    return StepOutcome::success(json{{"engine", field(r.evidence, "engine")}, {"head_ready", false}},
                                "all ranks alive after the rendezvous bound; the head is still loading");
  return StepOutcome::failure(r.error + "; last log lines:\n" + log_tail(ctx, s.node), r.evidence);
}

StepOutcome run_serve_wait(BindContext& ctx, const Step& s) {
  const std::string url = head_url(ctx.m) + "/health";
  const auto start = Clock::now();
  const auto deadline = start + ctx.m.gates.serve_timeout;
  std::string last = "no answer yet";
  for (int i = 0;; ++i) {
    auto r = http_get(url, 10s);
    if (r && r->status == 200) {
      // A head that answers while a worker has died is not a lane: it ends within seconds.
      if (auto dead = dead_rank(ctx)) return *dead;
      long long ms = std::chrono::duration_cast<Millis>(Clock::now() - start).count();
      json evidence{{"url", url}, {"waited_ms", ms}, {"body", r->body.substr(0, 500)}};
      // tandem-serve says where its start-up time went; the report charts it. Other engines
      // answer something else (or nothing), which is no failure.
      if (json phases = all_startup_phases(ctx, r->body); !phases.empty()) evidence["startup"] = phases;
      // The head's agent marks its rank ready when asked (engine.wait_ready). A head that was
      // still loading at the rendezvous bound was never asked again, so `status` said "starting"
      // after a bind that had bound (seen under load in CI): ask it now that the port answers.
      // Bookkeeping, not the lane: an agent that cannot say so does not fail the step.
      AgentReply a = ctx.agent(s.node).engine_wait_ready(Millis(5000));
      evidence["agent_phase"] = a.ok ? field(a.body, "engine").value("phase", "") : "not confirmed: " + a.error;
      return StepOutcome::success(evidence, "/health answered 200");
    }
    last = r ? "HTTP " + std::to_string(r->status) : r.error().message;
    if (i % 4 == 0) {
      if (auto dead = dead_rank(ctx)) return *dead;
      ctx.progress.note(s.node, "waiting for " + url + ": " + last);
    }
    if (Clock::now() >= deadline)
      return StepOutcome::failure(url + " did not answer 200 within " + format_duration(ctx.m.gates.serve_timeout) +
                                  " (last: " + last + ")");
    std::this_thread::sleep_for(500ms);
  }
}

}  // namespace tandem::ctl
