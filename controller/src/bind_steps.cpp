// The map from a plan step's action to what carries it out, and BindContext's bookkeeping.
#include "bind_steps.hpp"

#include <chrono>
#include <thread>

#include "bind_report.hpp"

namespace tandem::ctl {

Status BindContext::record(json rec) {
  rec["bind_id"] = run.bind_id;
  auto st = journal.append(std::move(rec));
  if (!st) return st.error().with_context("controller journal");
  fold(run, journal.records().back());
  return {};
}

std::string BindContext::op_for(const std::string& node, const std::string& what) const {
  for (size_t i = 0; i < m.nodes.size(); ++i)
    if (m.nodes[i].name == node) return run.bind_id + "-n" + std::to_string(i) + "-" + what;
  return run.bind_id + "-" + what;
}

StepOutcome run_report_write(BindContext& ctx, const Step& s) {
  // "bound" is only written for a lane whose ranks all run. Asked twice, a quarter second apart:
  // an agent sees a rank that was just killed only once it has reaped it, and this is the last
  // look before the lane is declared good (tests/faults kills a rank right before this step).
  if (auto dead = dead_rank(ctx)) return *dead;
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  if (auto dead = dead_rank(ctx)) return *dead;
  auto written = write_report(ctx, "bound", s.index);
  if (!written) return StepOutcome::failure(written.error().message);
  return StepOutcome::success({{"markdown", written->markdown}, {"json", written->json}, {"html", written->html}}, written->html);
}

StepOutcome run_step(BindContext& ctx, const Step& s) {
  try {
    const std::string& a = s.action;
    if (a == "preflight") return run_preflight(ctx, s);
    if (a == "deadman.arm") return run_deadman_arm(ctx, s);
    if (a == "deadman.disarm") return run_deadman_disarm(ctx, s);
    if (a == "stop.command" || a == "stop.verify") return run_stop(ctx, s);
    if (a == "stage.files") return run_stage(ctx, s);
    if (a == "stage.check") return run_stage_check(ctx, s);
    if (!agent_step_name(a).empty()) return run_hygiene(ctx, s);
    if (a == "hashes.compare") return run_hash_compare(ctx, s);
    if (a == "engine.start") return run_engine_start(ctx, s);
    if (a == "engine.wait_ready") return run_engine_wait_ready(ctx, s);
    if (a == "engine.rendezvous") return run_rendezvous(ctx, s);
    if (a == "serve.wait") return run_serve_wait(ctx, s);
    if (a.starts_with("gate.")) return run_gate(ctx, s);
    if (a == "report.write") return run_report_write(ctx, s);
    return StepOutcome::failure("tandemctl does not know plan action '" + a + "' (plan and bind are out of step)");
  } catch (const json::exception& e) {
    return StepOutcome::failure(s.node + ": unexpected answer while running " + s.action + ": " + e.what());
  }
}

}  // namespace tandem::ctl
