// spawn: fork + exec with only async-signal-safe calls after fork (the agent is multithreaded), so
// everything that allocates or takes locks (user lookup, argv/envp arrays) happens before fork.
#include "tandem/supervise/process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "tandem/supervise/proc_stat.hpp"

namespace tandem::supervise {

Env base_env() {
  return {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, {"LANG", "C.UTF-8"}};
}

std::string ExitStatus::str() const {
  switch (kind) {
    case Kind::exited:
      return "exit code " + std::to_string(code);
    case Kind::signaled:
      return "signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
    case Kind::unknown:
      break;
  }
  return "unknown (not our child)";
}

ExitStatus ExitStatus::from_wait_status(int ws) {
  ExitStatus s;
  if (WIFEXITED(ws)) {
    s.kind = Kind::exited;
    s.code = WEXITSTATUS(ws);
  } else if (WIFSIGNALED(ws)) {
    s.kind = Kind::signaled;
    s.signal = WTERMSIG(ws);
  }
  return s;
}

namespace {

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string name, home;
};

// Resolve the run user before fork (getpwnam/getgrouplist are not async-signal-safe).
// nullopt: no switch needed. Not root and a different user: refused, not silently ignored.
Result<std::optional<Identity>> resolve_user(const std::string& user) {
  if (user.empty()) return std::optional<Identity>{};
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<std::size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = ::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (rc != 0) return sys_error("look up run user '" + user + "'", rc);
  if (!found) return Error{"run user '" + user + "' does not exist"};
  if (pw.pw_uid == ::geteuid()) return std::optional<Identity>{};
  if (::geteuid() != 0) {
    return Error{"cannot run as '" + user + "': the agent runs as uid " + std::to_string(::geteuid()) +
                 ", not root, so it cannot switch users"};
  }
  Identity id;
  id.uid = pw.pw_uid;
  id.gid = pw.pw_gid;
  id.name = pw.pw_name;
  id.home = pw.pw_dir;
  int n = 32;
  for (;;) {
    id.groups.resize(static_cast<std::size_t>(n));
    int want = n;
    if (::getgrouplist(pw.pw_name, pw.pw_gid, id.groups.data(), &want) >= 0) {
      id.groups.resize(static_cast<std::size_t>(want));
      break;
    }
    if (want <= n) return Error{"getgrouplist for '" + user + "' failed"};
    n = want;
  }
  return std::optional<Identity>{std::move(id)};
}

// What the child reports through the exec pipe when it fails before exec.
struct ChildFailure {
  int stage;
  int err;
};
enum Stage : int { kSetsid = 1, kSignals, kStdio, kGroups, kSetgid, kSetuid, kChdir, kCloexec, kExec };

const char* stage_name(int s) {
  switch (s) {
    case kSetsid: return "setsid";
    case kSignals: return "reset signals";
    case kStdio: return "redirect stdio";
    case kGroups: return "setgroups";
    case kSetgid: return "setgid";
    case kSetuid: return "setuid";
    case kChdir: return "chdir";
    case kCloexec: return "close inherited fds";
    case kExec: return "execve";
    default: return "child setup";
  }
}

[[noreturn]] void child_fail(int pipe_fd, int stage) {
  ChildFailure f{stage, errno};
  [[maybe_unused]] ssize_t n = ::write(pipe_fd, &f, sizeof f);
  ::_exit(127);
}

// Mark every fd >= 3 close-on-exec. Agent fds should already be O_CLOEXEC; this is the backstop
// for any that are not (a library's socket, an inherited fd), so nothing leaks into the engine.
bool cloexec_from_3(int max_fd) {
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return true;
  for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // pre-5.11 kernels
  return true;
}

}  // namespace

Result<Child> spawn(const SpawnOptions& o) {
  if (o.log_path.empty()) {
    int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0) return sys_error("open /dev/null");
    auto r = spawn_to_fd(o, devnull);
    ::close(devnull);
    return r;
  }
  // 0640: engine logs may carry prompts; readable by the agent's group, not the world.
  int log = ::open(o.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log < 0) return sys_error("open log " + o.log_path);
  auto r = spawn_to_fd(o, log);
  ::close(log);
  return r;
}

// long-function: the child's code between fork and execve must stay async-signal-safe and in one
// place (no allocation, no locks), so everything it needs is built just above the fork, in this body.
Result<Child> spawn_to_fd(const SpawnOptions& o, int output_fd) {
  if (o.argv.empty() || o.argv[0].empty() || o.argv[0][0] != '/')
    return Error{"spawn: argv[0] must be an absolute path, got '" + (o.argv.empty() ? "" : o.argv[0]) + "'"};
  const std::string what = "spawn " + o.argv[0];
  auto ident = resolve_user(o.run_user);
  if (!ident) return ident.error().with_context(what);

  // Everything the child needs, built before fork.
  Env env = o.env;
  if (ident.value()) {
    auto has = [&](const char* k) {
      for (auto& [key, v] : env)
        if (key == k) return true;
      return false;
    };
    if (!has("HOME")) env.emplace_back("HOME", ident.value()->home);
    if (!has("USER")) env.emplace_back("USER", ident.value()->name);
    if (!has("LOGNAME")) env.emplace_back("LOGNAME", ident.value()->name);
  }
  std::vector<std::string> env_strings;
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string cwd = o.cwd.empty() ? "/" : o.cwd;
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  const int max_fd = nofile.rlim_cur == RLIM_INFINITY || nofile.rlim_cur > 65536 ? 65536 : static_cast<int>(nofile.rlim_cur);

  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return sys_error("open /dev/null").with_context(what);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    ::close(devnull);
    return sys_error("pipe").with_context(what);
  }

  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(devnull);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return sys_error("fork", err).with_context(what);
  }
  if (pid == 0) {
    const int ep = pipefd[1];
    // Own session => own process group (pgid == pid), no controlling terminal.
    if (::setsid() < 0) child_fail(ep, kSetsid);
    // The agent may block or ignore signals in its threads; the engine must start clean.
    sigset_t none;
    sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) child_fail(ep, kSignals);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);  // fails harmlessly for KILL/STOP
    // dup2 clears close-on-exec on the target, so only 0, 1, 2 survive exec.
    if (::dup2(devnull, 0) < 0 || ::dup2(output_fd, 1) < 0 || ::dup2(output_fd, 2) < 0) child_fail(ep, kStdio);
    if (ident.value()) {
      const Identity& id = *ident.value();
      // Groups first, then gid, then uid: after setuid we could no longer change the others.
      if (::setgroups(id.groups.size(), id.groups.data()) != 0) child_fail(ep, kGroups);
      if (::setgid(id.gid) != 0) child_fail(ep, kSetgid);
      if (::setuid(id.uid) != 0) child_fail(ep, kSetuid);
    }
    if (::chdir(cwd.c_str()) != 0) child_fail(ep, kChdir);
    if (!cloexec_from_3(max_fd)) child_fail(ep, kCloexec);
    ::execve(argv[0], argv.data(), envp.data());
    child_fail(ep, kExec);
  }

  ::close(devnull);
  ::close(pipefd[1]);
  ChildFailure f{};
  ssize_t n;
  do {
    n = ::read(pipefd[0], &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n > 0) {  // the child failed before exec and has _exit(127)ed: reap it
    int ws;
    while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    return sys_error(stage_name(f.stage), f.err).with_context(what);
  }
  return Child{pid, pid, std::chrono::system_clock::now()};
}

Result<std::optional<ExitStatus>> wait_for(pid_t pid, Duration timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::milliseconds(1);
  for (;;) {
    int ws = 0;
    pid_t r = ::waitpid(pid, &ws, WNOHANG);
    if (r == pid) return std::optional<ExitStatus>{ExitStatus::from_wait_status(ws)};
    if (r < 0 && errno != EINTR) return sys_error("waitpid " + std::to_string(pid));
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::optional<ExitStatus>{};
    // Short first sleeps so quick commands return quickly; capped so long waits stay cheap.
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(step, deadline - now));
    step = std::min(step * 2, std::chrono::milliseconds(20));
  }
}

bool kill_group(pid_t pgid, Duration grace, const std::function<bool()>& leader_gone) {
  // Never kill(-1)/kill(0), and never the agent's own group (a corrupt record must not make the
  // agent signal itself).
  if (pgid <= 1 || pgid == ::getpgrp()) return false;
  auto all_gone = [&] { return leader_gone() && live_group_members(pgid).empty(); };
  auto wait_until = [&](std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (all_gone()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  ::kill(-pgid, SIGTERM);
  if (wait_until(std::chrono::steady_clock::now() + grace)) return true;
  ::kill(-pgid, SIGKILL);
  // SIGKILL cannot be caught, but a process in uninterruptible sleep (GPU driver teardown) takes
  // a moment to die; bounded so a stuck kernel cannot hang the agent.
  return wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(10));
}

Result<ExitStatus> terminate_group(const Child& child, Duration grace) {
  std::optional<ExitStatus> status;
  auto leader_gone = [&] {
    if (status) return true;
    int ws = 0;
    pid_t r = ::waitpid(child.pid, &ws, WNOHANG);
    if (r == child.pid) status = ExitStatus::from_wait_status(ws);
    if (r < 0 && errno == ECHILD) status = ExitStatus{};  // reaped elsewhere
    return status.has_value();
  };
  bool gone = kill_group(child.pgid, grace, leader_gone);
  if (!status) return Error{"terminate pid " + std::to_string(child.pid) + ": still running after SIGKILL"};
  if (!gone) return Error{"terminate group " + std::to_string(child.pgid) + ": leader ended (" + status->str() +
                          ") but members survived SIGKILL"};
  return *status;
}

}  // namespace tandem::supervise
