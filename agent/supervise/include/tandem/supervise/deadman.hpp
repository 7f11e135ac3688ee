// The dead-man switch: armed before the outage, it rolls back to the old serving lane at the
// deadline unless the bind is proven and it is disarmed. Two backends:
//   systemd  a transient timer (systemd-run --on-active) that runs `tandemd deadman-fire` from
//            PID 1 -- survives the death of both controller and agent;
//            A reboot takes the transient timer (it lives in /run): the next agent start makes it
//            again for what is left of the deadline, or for 1 s when it passed meanwhile;
//   agent    for hosts without systemd as PID 1 (containers, tests): the deadline lives in the
//            fsynced state file and a timer thread fires it; a restarted agent reloads it and fires
//            at once if the deadline passed while it was down.
// Either way firing is deadman_fire(): the same code, at most once.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/manifest.hpp"
#include "tandem/supervise/deadman_fire.hpp"
#include "tandem/supervise/deadman_systemd.hpp"

namespace tandem::supervise {

struct DeadmanOptions {
  std::string state_dir;  // this bind's dead-man dir, e.g. /var/lib/tandem/deadman/<bind>
  std::string bind;       // names the systemd unit: tandem-deadman-<bind>
  DeadmanBackend backend = DeadmanBackend::agent;  // for the next arm()
  std::string tandemd_path = "/usr/local/sbin/tandemd";  // what the systemd timer runs
  SystemdTools systemd;
  bool skip_pid1_check = false;  // tests drive fake systemd-run/systemctl on a host without systemd
  Duration kill_grace = std::chrono::seconds(5);
};

struct DeadmanStatus {
  bool armed = false;
  std::optional<std::chrono::system_clock::time_point> deadline;  // wall clock
  long long seconds_left = 0;  // 0 when not armed or overdue
  DeadmanBackend backend = DeadmanBackend::agent;
  bool fired = false;
  bool fire_complete = false;  // fired but not complete after a restart: it was interrupted
  std::string fired_by;
  std::int64_t fired_at_ms = 0;  // wall clock, unix ms; 0 unless fired
  int timer_rearms = 0;          // systemd backend: timers re-made after a reboot (resume_systemd_timer)
  std::vector<CommandOutcome> outcomes;
  std::string detail;  // e.g. the systemd timer's state, or why the last fire attempt failed
};

class Deadman {
 public:
  static Result<std::unique_ptr<Deadman>> open(DeadmanOptions options);
  ~Deadman();  // stops the timer thread; the deadline stays on disk for the next agent
  Deadman(const Deadman&) = delete;
  Deadman& operator=(const Deadman&) = delete;

  // Refuses when already armed (disarm first) or while a fire is in progress.
  Result<DeadmanStatus> arm(Duration delay, std::vector<Command> rollback);
  // Refuses once fired: the rollback has (begun to) run and cannot be called back.
  Result<DeadmanStatus> disarm();
  Result<DeadmanStatus> status() const;
  // Block until a fire has completed (true) or `timeout` passed (false).
  bool wait_fired(Duration timeout);

 private:
  explicit Deadman(DeadmanOptions options);
  void timer_loop();
  void resume_systemd_timer();  // from open(): a reboot since the arm took the transient timer
  void refresh_cache(const DeadmanState& s);
  DeadmanStatus to_status(const DeadmanState& s) const;

  DeadmanOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::optional<DeadmanState> cache_;  // what the timer thread acts on (agent backend)
  std::string last_fire_error_;
  bool timer_lost_ = false;  // systemd backend, timer not re-made after a reboot: this thread fires
  std::thread timer_;
};

}  // namespace tandem::supervise
