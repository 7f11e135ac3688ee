#include "tandem/supervise/deadman.hpp"

#include <algorithm>

#include "tandem/supervise/process.hpp"
#include "tandem/supervise/proc_stat.hpp"

namespace tandem::supervise {

using namespace std::chrono_literals;

namespace {

// Run a systemctl/systemd-run argv; an error carries its exit status and output.
Status run_tool(const std::vector<std::string>& argv, std::string* output = nullptr) {
  RunOptions ro;
  ro.argv = argv;
  ro.timeout = 30s;
  auto r = run_capture(ro);
  if (!r) return r.error();
  if (output) *output = r->output;
  if (!r->status.success())
    return Error{argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + ": " + r->status.str() + ": " + r->output};
  return Ok{};
}

bool agent_should_fire(const DeadmanState& s) { return s.backend == DeadmanBackend::agent && s.armed && !s.fired; }

}  // namespace

Deadman::Deadman(DeadmanOptions options) : opt_(std::move(options)) {}

Result<std::unique_ptr<Deadman>> Deadman::open(DeadmanOptions options) {
  std::unique_ptr<Deadman> d(new Deadman(std::move(options)));
  auto loaded = load_deadman_state(d->opt_.state_dir);
  if (!loaded) return loaded.error().with_context("open dead-man");
  d->cache_ = loaded.value();
  if (d->cache_ && d->cache_->backend == DeadmanBackend::systemd) d->resume_systemd_timer();
  // The thread starts at once: a deadline that passed while the agent was down fires now.
  d->timer_ = std::thread([p = d.get()] { p->timer_loop(); });
  return d;
}

Deadman::~Deadman() {
  {
    std::lock_guard lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
}

void Deadman::refresh_cache(const DeadmanState& s) {
  {
    std::lock_guard lk(mu_);
    cache_ = s;
  }
  cv_.notify_all();
}

// A systemd dead-man armed in an earlier boot: its transient timer lived in /run and is gone with
// the reboot, and the old lane's cron is still commented out, so nothing else would roll back.
// Make the timer again for what is left of the deadline (1 s when it passed while the node was
// down), so the rollback still runs from PID 1 as `tandemd deadman-fire`. If that fails, this
// agent keeps the deadline itself (the agent backend's thread). Nothing to do when fired,
// disarmed, or still in the boot that armed it (PID 1 holds that timer).
void Deadman::resume_systemd_timer() {
  const std::string what = "dead-man: re-make the systemd timer after a reboot";
  auto lock = StateLock::acquire(opt_.state_dir);
  if (!lock) {
    last_fire_error_ = lock.error().with_context(what).message;
    return;
  }
  auto loaded = load_deadman_state(opt_.state_dir);
  if (!loaded || !loaded.value()) return;
  DeadmanState s = *loaded.value();
  const std::string now_boot = boot_id();
  if (s.backend != DeadmanBackend::systemd || !s.armed || s.fired || s.boot_id == now_boot) return;
  const std::int64_t left = s.deadline_ms - now_unix_ms();
  const long long seconds = left > 0 ? (left + 999) / 1000 : 1;
  Status made = Ok{};
  if (!opt_.skip_pid1_check) made = check_systemd_is_pid1();
  auto unit = deadman_unit(s.bind);
  if (made && !unit) made = unit.error();
  if (made) {
    (void)run_tool(reset_failed_argv(opt_.systemd, unit.value()));
    made = run_tool(systemd_run_argv(opt_.systemd, unit.value(), seconds, opt_.tandemd_path, opt_.state_dir));
  }
  if (!made) {
    timer_lost_ = true;
    last_fire_error_ = what + " failed, so this agent keeps the deadline itself: " + made.error().message;
  }
  // Within this boot the monotonic note is the truth again (immune to wall clock steps).
  s.boot_id = now_boot;
  s.deadline_boot_ns = boottime_ns() + std::max<std::int64_t>(left, 0) * 1'000'000;
  s.timer_rearms += 1;
  s.timer_rearmed_at_ms = now_unix_ms();
  if (auto st = save_deadman_state(opt_.state_dir, s); !st && last_fire_error_.empty())
    last_fire_error_ = st.error().with_context(what).message;
  cache_ = s;
}

void Deadman::timer_loop() {
  std::unique_lock lk(mu_);
  while (!closing_) {
    const bool mine = cache_ && (agent_should_fire(*cache_) || (timer_lost_ && cache_->armed && !cache_->fired));
    if (!mine) {
      cv_.wait(lk);
      continue;
    }
    std::int64_t left = deadman_ms_left(*cache_);
    if (left > 0) {
      // Re-reads the clock at least every second, so a long wait cannot drift.
      cv_.wait_for(lk, std::min<std::chrono::milliseconds>(std::chrono::milliseconds(left), 1000ms));
      continue;
    }
    lk.unlock();
    auto r = deadman_fire(opt_.state_dir, FireOptions{"agent", opt_.kill_grace});
    lk.lock();
    if (r) {
      cache_ = r->state;
      last_fire_error_.clear();
    } else {
      // Nothing ran (the fired flag could not be written): retry, the rollback must happen.
      last_fire_error_ = r.error().message;
      cv_.wait_for(lk, 1s, [this] { return closing_; });
    }
    cv_.notify_all();
  }
}

DeadmanStatus Deadman::to_status(const DeadmanState& s) const {
  DeadmanStatus st;
  st.armed = s.armed;
  st.backend = s.backend;
  st.fired = s.fired;
  st.fire_complete = s.fire_complete;
  st.fired_by = s.fired_by;
  st.outcomes = s.outcomes;
  st.fired_at_ms = s.fired_at_ms;
  st.timer_rearms = s.timer_rearms;
  if (s.armed) {
    st.deadline = std::chrono::system_clock::time_point(std::chrono::milliseconds(s.deadline_ms));
    std::int64_t left = deadman_ms_left(s);
    st.seconds_left = left > 0 ? (left + 999) / 1000 : 0;
  }
  if (s.fired && !s.fire_complete) st.detail = "fired at " + std::to_string(s.fired_at_ms) + " ms; rollback in progress or interrupted";
  return st;
}

Result<DeadmanStatus> Deadman::arm(Duration delay, std::vector<Command> rollback) {
  const std::string what = "arm dead-man";
  if (delay <= Duration(0)) return Error{what + ": delay must be positive, got " + format_duration(delay)};
  std::string unit;
  if (opt_.backend == DeadmanBackend::systemd) {
    if (!opt_.skip_pid1_check)
      if (auto st = check_systemd_is_pid1(); !st) return st.error().with_context(what);
    auto u = deadman_unit(opt_.bind);
    if (!u) return u.error().with_context(what);
    unit = u.value();
  }
  auto lock = StateLock::acquire(opt_.state_dir);
  if (!lock) return lock.error().with_context(what);
  auto loaded = load_deadman_state(opt_.state_dir);
  if (!loaded) return loaded.error().with_context(what);
  if (auto& old = loaded.value()) {
    if (old->armed) return Error{what + ": already armed (" + std::to_string((deadman_ms_left(*old) + 999) / 1000) +
                                 " s left); disarm first"};
    if (old->fired && !old->fire_complete)
      return Error{what + ": the previous dead-man fired and its rollback has not completed; look at it first"};
  }
  DeadmanState s;
  s.bind = opt_.bind;
  s.backend = opt_.backend;
  s.armed = true;
  s.armed_at_ms = now_unix_ms();
  s.deadline_ms = s.armed_at_ms + delay.count();
  s.boot_id = boot_id();
  s.deadline_boot_ns = boottime_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count();
  s.rollback = std::move(rollback);
  // The state goes to disk before the timer exists: whatever fires must find the commands.
  if (auto st = save_deadman_state(opt_.state_dir, s); !st) return st.error().with_context(what);
  if (s.backend == DeadmanBackend::systemd) {
    (void)run_tool(timer_stop_argv(opt_.systemd, unit));     // leftovers of an earlier bind, if any
    (void)run_tool(reset_failed_argv(opt_.systemd, unit));
    long long seconds = (delay.count() + 999) / 1000;
    if (auto st = run_tool(systemd_run_argv(opt_.systemd, unit, seconds, opt_.tandemd_path, opt_.state_dir)); !st) {
      s.armed = false;  // no timer, so not armed: say so on disk too
      s.disarmed_at_ms = now_unix_ms();
      (void)save_deadman_state(opt_.state_dir, s);
      return st.error().with_context(what + ": create transient timer " + unit + ".timer");
    }
  }
  {
    std::lock_guard lk(mu_);
    timer_lost_ = false;
  }
  refresh_cache(s);
  return to_status(s);
}

Result<DeadmanStatus> Deadman::disarm() {
  const std::string what = "disarm dead-man";
  auto lock = StateLock::acquire(opt_.state_dir);
  if (!lock) return lock.error().with_context(what);
  auto loaded = load_deadman_state(opt_.state_dir);
  if (!loaded) return loaded.error().with_context(what);
  if (!loaded.value()) return Error{what + ": nothing armed (no state in " + opt_.state_dir + ")"};
  DeadmanState s = *loaded.value();
  if (s.fired) return Error{what + ": too late, it fired (by " + s.fired_by + "); the rollback lane has run"};
  if (!s.armed) return to_status(s);  // disarming twice is a no-op (a retried request)
  // On disk first: if the systemd timer fires before we stop it, deadman-fire sees "disarmed".
  s.armed = false;
  s.disarmed_at_ms = now_unix_ms();
  if (auto st = save_deadman_state(opt_.state_dir, s); !st) return st.error().with_context(what);
  DeadmanStatus out = to_status(s);
  if (s.backend == DeadmanBackend::systemd) {
    auto u = deadman_unit(s.bind);
    if (u) {
      if (auto st = run_tool(timer_stop_argv(opt_.systemd, u.value())); !st)
        out.detail = "state disarmed, but stopping " + u.value() + ".timer failed (it will find nothing to do): " +
                     st.error().message;
    }
  }
  refresh_cache(s);
  return out;
}

Result<DeadmanStatus> Deadman::status() const {
  auto loaded = load_deadman_state(opt_.state_dir);  // systemd's deadman-fire writes it from outside
  if (!loaded) return loaded.error().with_context("dead-man status");
  DeadmanStatus st;
  st.backend = opt_.backend;
  if (loaded.value()) st = to_status(*loaded.value());
  if (loaded.value() && st.backend == DeadmanBackend::systemd && st.armed) {
    if (auto u = deadman_unit(loaded.value()->bind)) {
      std::string out;
      if (run_tool(timer_state_argv(opt_.systemd, u.value()), &out))
        st.detail = u.value() + ".timer: " + out.substr(0, out.find('\n'));
    }
  }
  std::lock_guard lk(mu_);
  if (!last_fire_error_.empty()) st.detail = "last fire attempt failed: " + last_fire_error_;
  return st;
}

bool Deadman::wait_fired(Duration timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto s = load_deadman_state(opt_.state_dir);
    if (s && s.value() && s.value()->fired && s.value()->fire_complete) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, 20ms);
  }
}

}  // namespace tandem::supervise
