// The dead-man's record (<state dir>/deadman.json): what to run, when, and what happened. It is
// the single truth shared by the agent backend, the systemd backend and `tandemd deadman-fire`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/manifest.hpp"
#include "tandem/result.hpp"

namespace tandem::supervise {

struct CommandOutcome {
  std::vector<std::string> argv;
  std::string status;  // "exit code 0", "signal 9 (Killed)", or "not run"
  int exit_code = -1;  // -1 unless it exited
  bool timed_out = false;
  std::string output_tail;
  std::string error;  // could not be started (the reason), else empty
  std::int64_t elapsed_ms = 0;
};

struct DeadmanState {
  std::string bind;
  DeadmanBackend backend = DeadmanBackend::agent;
  bool armed = false;
  std::int64_t armed_at_ms = 0;     // wall clock, unix ms
  std::int64_t deadline_ms = 0;     // wall clock, unix ms: the deadline across reboots
  std::string boot_id;              // the boot the monotonic note belongs to
  std::int64_t deadline_boot_ns = 0;  // CLOCK_BOOTTIME deadline: immune to wall clock steps
  std::vector<Command> rollback;
  // systemd backend: the transient timer lives in /run and dies with a reboot; the agent makes it
  // again at its next start (Deadman::open) for what is left of the deadline. How often, and when.
  int timer_rearms = 0;
  std::int64_t timer_rearmed_at_ms = 0;
  std::int64_t disarmed_at_ms = 0;
  bool fired = false;  // written (fsynced) before any rollback command runs: never fire twice
  std::int64_t fired_at_ms = 0;
  std::string fired_by;        // "agent" or "systemd" (deadman-fire)
  bool fire_complete = false;  // every rollback command has run and its outcome is recorded
  std::vector<CommandOutcome> outcomes;
};

std::int64_t now_unix_ms();
std::int64_t boottime_ns();

// Milliseconds until the deadline (negative: overdue). Uses the monotonic note within the boot it
// was taken in, the wall clock otherwise.
std::int64_t deadman_ms_left(const DeadmanState& s);

std::string deadman_state_path(const std::string& state_dir);
Status save_deadman_state(const std::string& state_dir, const DeadmanState& s);
Result<std::optional<DeadmanState>> load_deadman_state(const std::string& state_dir);

// An exclusive flock on <state dir>/deadman.lock: the agent's timer thread, `deadman-fire` run by
// systemd and arm/disarm may race at the deadline; whoever holds the lock decides.
class StateLock {
 public:
  static Result<StateLock> acquire(const std::string& state_dir);
  StateLock(StateLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  StateLock& operator=(StateLock&&) = delete;
  StateLock(const StateLock&) = delete;
  ~StateLock();

 private:
  explicit StateLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace tandem::supervise
