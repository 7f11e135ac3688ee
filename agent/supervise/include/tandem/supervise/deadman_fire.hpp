// Firing the dead-man: run the recorded rollback commands exactly once. `tandemd deadman-fire
// --state-dir DIR` (what the systemd timer runs) and the agent backend's timer both call this.
#pragma once
#include <string>

#include "tandem/supervise/deadman_state.hpp"
#include "tandem/units.hpp"

namespace tandem::supervise {

struct FireOptions {
  std::string fired_by = "systemd";  // recorded in the state: who pulled the trigger
  Duration kill_grace = std::chrono::seconds(5);  // after a rollback command's timeout, TERM -> KILL
};

struct FireReport {
  bool fired_now = false;  // false: nothing to do (not armed, disarmed, or already fired)
  std::string reason;      // why not, when fired_now is false
  DeadmanState state;      // the state after this call
};

// One rollback command, to completion or its timeout (then its group is killed after
// `kill_grace`); never an error: a command that could not start says why in the outcome.
// The controller's rollback (POST /v1/rollback/start) runs the same commands the same way.
CommandOutcome run_rollback_command(const Command& c, Duration kill_grace);

// Under the state dir's lock: if armed and not yet fired, write fired=true (fsynced) first, then
// run every rollback command in order -- all of them, even after one fails, since this is the
// last resort -- each with its own timeout, recording each outcome as it completes. An error
// only when the state cannot be read or the fired flag cannot be written (then nothing ran).
Result<FireReport> deadman_fire(const std::string& state_dir, const FireOptions& options = {});

}  // namespace tandem::supervise
