// The executors behind run_step, one per kind of plan action (see bind_steps.cpp for the map).
#pragma once
#include <optional>

#include "bind_context.hpp"

namespace tandem::ctl {

// j[key] when it is an object, else an empty object: agent answers are read defensively.
inline json field(const json& j, const char* key) {
  if (j.is_object()) {
    auto it = j.find(key);
    if (it != j.end() && it->is_object()) return *it;
  }
  return json::object();
}

// Plan action -> the agent's step name (hygiene_cron -> "cron"); empty if not a hygiene step.
std::string agent_step_name(Action action);
// stop.command or stop.verify: the steps that take the old lane down (one agent op per node).
bool is_stop(Action action);
StepOutcome apply_and_verify(BindContext& ctx, const std::string& node, const std::string& step, const std::string& op,
                             Millis timeout);

StepOutcome run_preflight(BindContext& ctx, const Step& s);
StepOutcome run_deadman_arm(BindContext& ctx, const Step& s);
StepOutcome run_deadman_disarm(BindContext& ctx, const Step& s);
StepOutcome run_stop(BindContext& ctx, const Step& s);
StepOutcome run_hygiene(BindContext& ctx, const Step& s);
// bind_steps_stage.cpp: the stage step, with its bytes, rate and ETA on the progress display.
StepOutcome run_stage(BindContext& ctx, const Step& s);
// Preflight's "stage.check": what the node's stage would copy, and whether it has the room (free
// space for the new files, stage.backup_budget for the backups), before anything changes.
StepOutcome run_stage_check(BindContext& ctx, const Step& s);
// "1.2 GiB of 40 GiB, files 3/40, 850 MB/s, ETA 46 s" from GET /v1/stage/progress.
std::string stage_progress_text(const json& progress, double seconds);

StepOutcome run_hash_compare(BindContext& ctx, const Step& s);
StepOutcome run_engine_start(BindContext& ctx, const Step& s);
StepOutcome run_engine_wait_ready(BindContext& ctx, const Step& s);
StepOutcome run_rendezvous(BindContext& ctx, const Step& s);
StepOutcome run_serve_wait(BindContext& ctx, const Step& s);

StepOutcome run_gate(BindContext& ctx, const Step& s);
StepOutcome run_report_write(BindContext& ctx, const Step& s);

// Every rank this bind started must still run; the first that does not is a failure (with its
// exit and log tail). Checked while waiting, before serving is declared, and before each dead-man
// is disarmed: a lane that lost a rank must never be left without its dead-man.
std::optional<StepOutcome> dead_rank(const BindContext& ctx);
// The engine log's last lines on `node`, for failure evidence ("" if the agent cannot say).
std::string log_tail(const BindContext& ctx, const std::string& node, std::size_t lines = 20);
std::string head_url(const Manifest& m);  // http://<head address>:<serve port>

}  // namespace tandem::ctl
