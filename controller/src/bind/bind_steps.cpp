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

namespace {

// One case per action, no default: a new Action that bind cannot run does not compile (-Wswitch).
StepOutcome dispatch(BindContext& ctx, const Step& s) {
  switch (s.action) {
    case Action::preflight: return run_preflight(ctx, s);
    case Action::deadman_arm: return run_deadman_arm(ctx, s);
    case Action::deadman_disarm: return run_deadman_disarm(ctx, s);
    case Action::stop_command:
    case Action::stop_verify: return run_stop(ctx, s);
    case Action::stage_files: return run_stage(ctx, s);
    case Action::stage_check: return run_stage_check(ctx, s);
    case Action::hygiene_cron:
    case Action::hygiene_shm:
    case Action::hygiene_page_cache:
    case Action::hygiene_cache_dir:
    case Action::hygiene_sha256: return run_hygiene(ctx, s);
    case Action::hashes_compare: return run_hash_compare(ctx, s);
    case Action::engine_start: return run_engine_start(ctx, s);
    case Action::engine_wait_ready: return run_engine_wait_ready(ctx, s);
    case Action::engine_rendezvous: return run_rendezvous(ctx, s);
    case Action::serve_wait: return run_serve_wait(ctx, s);
    case Action::gate: return run_gate(ctx, s);
    case Action::report_write: return run_report_write(ctx, s);
    // The failure path's steps are carried out by rollback_runner.cpp, never as bind steps.
    case Action::undo:
    case Action::rollback_command:
    case Action::rollback_verify: break;
  }
  return StepOutcome::failure("plan action '" + s.id() + "' is a rollback step; bind does not run it as a step");
}

}  // namespace

StepOutcome run_step(BindContext& ctx, const Step& s) {
  try {
    return dispatch(ctx, s);
  } catch (const json::exception& e) {
    return StepOutcome::failure(s.node + ": unexpected answer while running " + s.id() + ": " + e.what());
  }
}

}  // namespace tandem::ctl
