#include "tandem/supervise/deadman_fire.hpp"

#include "tandem/supervise/process.hpp"

namespace tandem::supervise {

CommandOutcome run_rollback_command(const Command& c, Duration kill_grace) {
  CommandOutcome out;
  out.argv = c.run;
  RunOptions ro;
  ro.argv = c.run;
  ro.timeout = c.timeout;
  ro.kill_grace = kill_grace;
  ro.max_output = 8 * 1024;  // the tail is evidence, not an archive
  auto r = run_capture(ro);
  if (!r) {
    out.status = "not run";
    out.error = r.error().message;
    return out;
  }
  out.status = r->status.str();
  if (r->status.kind == ExitStatus::Kind::exited) out.exit_code = r->status.code;
  out.timed_out = r->timed_out;
  out.output_tail = r->output;
  out.elapsed_ms = r->elapsed.count();
  return out;
}

Result<FireReport> deadman_fire(const std::string& dir, const FireOptions& o) {
  const std::string what = "fire dead-man in " + dir;
  DeadmanState state;
  {
    auto lock = StateLock::acquire(dir);
    if (!lock) return lock.error().with_context(what);
    auto loaded = load_deadman_state(dir);
    if (!loaded) return loaded.error().with_context(what);
    if (!loaded.value()) return FireReport{false, "no dead-man state in " + dir, {}};
    state = *loaded.value();
    if (state.fired) return FireReport{false, "already fired (by " + state.fired_by + ")", state};
    if (!state.armed) return FireReport{false, "not armed (disarmed)", state};
    state.fired = true;
    state.armed = false;
    state.fired_at_ms = now_unix_ms();
    state.fired_by = o.fired_by;
    // The point of no return: once this is on disk no other caller (or restarted agent) fires.
    // If it cannot be written, nothing runs: a double rollback is worse than an error someone sees.
    if (auto st = save_deadman_state(dir, state); !st) return st.error().with_context(what);
  }
  // The lock is released while commands run (they may take minutes), so status and disarm stay
  // responsive; both see fired=true and leave the state alone.
  for (const Command& c : state.rollback) {
    state.outcomes.push_back(run_rollback_command(c, o.kill_grace));
    auto lock = StateLock::acquire(dir);
    if (lock) (void)save_deadman_state(dir, state);  // best effort: keep going whatever happens
  }
  state.fire_complete = true;
  auto lock = StateLock::acquire(dir);
  if (!lock) return lock.error().with_context(what + ": record completion");
  if (auto st = save_deadman_state(dir, state); !st) return st.error().with_context(what + ": record completion");
  return FireReport{true, "", state};
}

}  // namespace tandem::supervise
