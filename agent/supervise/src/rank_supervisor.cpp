#include "tandem/supervise/rank_supervisor.hpp"

#include <sys/wait.h>

#include <cerrno>

#include "tandem/serve_args.hpp"
#include "tandem/supervise/log_tail.hpp"
#include "tandem/supervise/proc_stat.hpp"
#include "tandem/supervise/tcp_probe.hpp"

namespace tandem::supervise {

using namespace std::chrono_literals;

const char* to_string(RankPhase p) {
  switch (p) {
    case RankPhase::idle: return "idle";
    case RankPhase::starting: return "starting";
    case RankPhase::ready: return "ready";
    case RankPhase::exited: return "exited";
    case RankPhase::adopted: return "adopted";
  }
  return "?";
}

RankSpec RankSpec::from_manifest(const Manifest& m, const Node& node, std::string log_path) {
  RankSpec s;
  s.argv = serve_argv(m, node);
  for (auto& kv : serve_env(m)) s.env.push_back(kv);
  s.run_user = m.engine.run_user;
  s.log_path = std::move(log_path);
  // Ready = the rank's HTTP port answers: the head's API (after its rendezvous and engine start),
  // a headless worker's health endpoint on its fabric address (after loading its slice).
  s.ready_port = m.engine.serve.port;
  if (node.role == Role::head) {
    const std::string& host = m.engine.serve.host;
    s.ready_host = host.empty() || host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host;
  } else {
    s.ready_host = node.fabric_address.empty() ? node.address : node.fabric_address;
  }
  return s;
}

namespace {
bool running(RankPhase p) { return p == RankPhase::starting || p == RankPhase::ready || p == RankPhase::adopted; }
}  // namespace

RankSupervisor::RankSupervisor(std::string state_dir) : state_dir_(std::move(state_dir)) {}

Result<std::unique_ptr<RankSupervisor>> RankSupervisor::open(std::string state_dir) {
  std::unique_ptr<RankSupervisor> s(new RankSupervisor(std::move(state_dir)));
  auto rec = load_rank_record(s->state_dir_);
  if (!rec) return rec.error().with_context("open rank supervisor");
  if (!rec.value()) return s;
  const RankRecord& r = *rec.value();
  if (r.boot_id == boot_id() && same_process_alive(r.pid, r.start_ticks)) {
    s->status_.phase = RankPhase::adopted;
    s->status_.pid = r.pid;
    s->status_.pgid = r.pgid;
    s->status_.start_ticks = r.start_ticks;
    s->status_.started_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(r.started_at_ms));
    s->status_.log_path = r.log_path;
    s->ready_host_ = r.ready_host;
    s->ready_port_ = r.ready_port;
  } else if (auto st = clear_rank_record(s->state_dir_); !st) {
    // The recorded process is gone (or the pid now names another process): the record is stale.
    return st.error().with_context("open rank supervisor: clear stale record");
  }
  return s;
}

RankSupervisor::~RankSupervisor() {
  {
    std::lock_guard lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  join_reaper();
}

void RankSupervisor::join_reaper() {
  if (reaper_.joinable()) reaper_.join();
}

void RankSupervisor::on_exit(std::function<void(const RankStatus&)> callback) {
  std::lock_guard lk(mu_);
  on_exit_ = std::move(callback);
}

Result<RankStatus> RankSupervisor::start(const RankSpec& spec) {
  std::unique_lock lk(mu_);
  if (running(status_.phase))
    return Error{"start rank: a rank is already " + std::string(to_string(status_.phase)) + " (pid " +
                 std::to_string(status_.pid) + "); stop it first"};
  lk.unlock();
  join_reaper();  // the previous rank's reaper has finished (phase is exited or idle)
  auto child = spawn(SpawnOptions{spec.argv, spec.env, spec.run_user, spec.log_path, spec.cwd});
  if (!child) return child.error().with_context("start rank");
  auto ps = read_proc_stat(child->pid);
  RankRecord rec{child->pid, child->pgid, ps ? ps->start_ticks : 0, boot_id(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(child->started_at.time_since_epoch()).count(),
                 spec.log_path, spec.ready_host, spec.ready_port, spec.argv};
  // A rank we could not find again after a crash is worse than no rank: undo the start.
  if (auto st = save_rank_record(state_dir_, rec); !st) {
    (void)terminate_group(child.value(), 2s);
    return st.error().with_context("start rank");
  }
  lk.lock();
  status_ = RankStatus{RankPhase::starting, child->pid, child->pgid, rec.start_ticks, child->started_at,
                       spec.log_path, std::nullopt, false};
  ready_host_ = spec.ready_host;
  ready_port_ = spec.ready_port;
  reaper_ = std::thread([this, pid = child->pid, pgid = child->pgid] { reap_loop(pid, pgid); });
  return status_;
}

// Polls waitpid on our own pid only (never -1: other parts of the agent have children too).
// 20 ms polling notices a dead rank promptly and lets the destructor stop the thread at once.
void RankSupervisor::reap_loop(pid_t pid, pid_t pgid) {
  for (;;) {
    int ws = 0;
    pid_t r = ::waitpid(pid, &ws, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) {
      std::function<void(const RankStatus&)> cb;
      RankStatus snapshot;
      {
        std::lock_guard lk(mu_);
        status_.phase = RankPhase::exited;
        status_.exit = r == pid ? ExitStatus::from_wait_status(ws) : ExitStatus{};
        snapshot = status_;
        cb = on_exit_;
      }
      (void)clear_rank_record(state_dir_);
      cv_.notify_all();
      // Processes the rank forked outlive it in its group (and keep GPU memory or half a
      // rendezvous); the group id stays ours while any member lives, so clearing it is safe.
      if (!live_group_members(pgid).empty()) kill_group(pgid, 5s, [] { return true; });
      if (cb) cb(snapshot);
      return;
    }
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, 20ms, [this] { return closing_; })) return;
  }
}

RankStatus RankSupervisor::status() const {
  std::lock_guard lk(mu_);
  RankStatus s = status_;
  if (s.phase == RankPhase::adopted && !same_process_alive(s.pid, s.start_ticks)) {
    s.phase = RankPhase::exited;
    s.exit = ExitStatus{};
  }
  return s;
}

RankStatus RankSupervisor::wait_exit(Duration timeout) {
  std::unique_lock lk(mu_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running(status_.phase)) {
    if (status_.phase == RankPhase::adopted) {  // not our child: no reaper, poll /proc
      if (!same_process_alive(status_.pid, status_.start_ticks)) break;
      if (std::chrono::steady_clock::now() >= deadline) break;
      lk.unlock();
      std::this_thread::sleep_for(20ms);
      lk.lock();
      continue;
    }
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout) break;
  }
  lk.unlock();
  return status();
}

Result<RankStatus> RankSupervisor::wait_ready(Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    RankStatus s = status();
    std::string host;
    int port = 0;
    {
      std::lock_guard lk(mu_);
      host = ready_host_;
      port = ready_port_;
    }
    if (s.phase == RankPhase::ready) return s;
    if (!running(s.phase)) {
      std::string msg = "rank " + std::to_string(s.pid) + " is " + to_string(s.phase);
      if (s.exit) msg += " (" + s.exit->str() + ")";
      msg += " before its port " + host + ":" + std::to_string(port) + " accepted";
      if (auto t = tail(20); t.ok() && !t->empty()) {
        msg += "; last log lines:";
        for (auto& l : t.value()) msg += "\n  " + l;
      }
      return Error{msg};
    }
    auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    auto probe = port_accepts(host, port, std::clamp<Duration>(left, 1ms, 1000ms));
    if (!probe) return probe.error().with_context("wait for rank ready");
    if (probe.value()) {
      std::lock_guard lk(mu_);
      if (status_.phase == RankPhase::starting) status_.phase = RankPhase::ready;
      if (status_.phase == RankPhase::ready || status_.phase == RankPhase::adopted) return status_;
      continue;  // it died just after accepting: report that
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return Error{"rank " + std::to_string(s.pid) + " not ready: " + host + ":" + std::to_string(port) +
                   " did not accept a connection within " + format_duration(timeout)};
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, 100ms, [this] { return !running(status_.phase); });
  }
}

Result<RankStatus> RankSupervisor::stop(Duration grace) {
  std::unique_lock lk(mu_);
  if (status_.phase == RankPhase::adopted) {
    lk.unlock();
    return stop_orphan(grace);
  }
  if (!running(status_.phase)) return status_;
  status_.stop_requested = true;
  const pid_t pgid = status_.pgid;
  lk.unlock();
  bool gone = kill_group(pgid, grace, [this] {
    std::lock_guard g(mu_);
    return status_.phase == RankPhase::exited;
  });
  RankStatus s = wait_exit(5s);  // the reaper records the exit status
  if (!gone || running(s.phase))
    return Error{"stop rank " + std::to_string(s.pid) + ": processes in group " + std::to_string(pgid) +
                 " survived SIGKILL"};
  return s;
}

Result<RankStatus> RankSupervisor::stop_orphan(Duration grace) {
  RankStatus s = status();
  const std::string what = "stop adopted rank " + std::to_string(s.pid);
  if (s.phase == RankPhase::adopted) {
    // Proven just now by status(): same pid, same start time, not a zombie. Its group is taken
    // from /proc, not from the record, and must be the one it leads (as spawn() made it).
    auto ps = read_proc_stat(s.pid);
    if (!ps || ps->pgrp != s.pid)
      return Error{what + ": it no longer leads its own process group (pgid " +
                   std::to_string(ps ? ps->pgrp : -1) + "); not signalled"};
    bool gone = kill_group(ps->pgrp, grace, [&] {
      ::waitpid(s.pid, nullptr, WNOHANG);  // in case it is our child after all (tests): no zombie
      return !same_process_alive(s.pid, s.start_ticks);
    });
    if (!gone) return Error{what + ": processes in group " + std::to_string(s.pgid) + " survived SIGKILL"};
  }
  if (auto st = clear_rank_record(state_dir_); !st) return st.error().with_context(what);
  std::lock_guard lk(mu_);
  status_.phase = RankPhase::exited;
  status_.exit = ExitStatus{};  // not our child: no wait status
  status_.stop_requested = true;
  return status_;
}

Result<std::vector<std::string>> RankSupervisor::tail(std::size_t lines) const {
  std::string path;
  {
    std::lock_guard lk(mu_);
    path = status_.log_path;
  }
  if (path.empty()) return Error{"tail: no rank log (nothing started, or it logs nowhere)"};
  return tail_lines(path, lines);
}

}  // namespace tandem::supervise
