#include "tandem/agent/command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>

namespace tandem::agent {
namespace {

using Clock = std::chrono::steady_clock;

void append_tail(std::string& tail, const char* data, std::size_t n, std::size_t keep) {
  tail.append(data, n);
  if (tail.size() > keep) tail.erase(0, tail.size() - keep);
}

void set_status(CommandResult& r, int status) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
}

}  // namespace

nlohmann::json CommandResult::to_json() const {
  return {{"argv", argv},           {"exit_code", exit_code}, {"signal", signal}, {"timed_out", timed_out},
          {"duration_ms", duration_ms}, {"output_tail", output_tail}, {"ok", success()}};
}

std::optional<std::string> find_executable(const std::string& name) {
  const char* env = std::getenv("PATH");
  std::string path = env ? env : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::size_t pos = 0;
  while (pos <= path.size()) {
    auto colon = path.find(':', pos);
    std::string dir = path.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (!dir.empty() && dir[0] == '/') {
      std::string candidate = dir + "/" + name;
      struct stat st {};
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
    }
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return std::nullopt;
}

Result<CommandResult> run_command(const std::vector<std::string>& argv, Duration timeout, std::size_t tail_bytes) {
  if (argv.empty()) return plain_error("", "refused: empty command");
  if (argv[0].empty() || argv[0][0] != '/') return plain_error(argv[0], "refused: argv[0] must be an absolute path (no shell, no PATH lookup)");
  // Everything the child touches is prepared before fork: after fork only async-signal-safe calls.
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int out[2], errp[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return sys_error(argv[0], "pipe failed");
  if (::pipe2(errp, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return sys_error(argv[0], "pipe failed");
  }
  const auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid < 0) return sys_error(argv[0], "fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execv(cargv[0], cargv.data());
    int e = errno;
    ssize_t ignored = ::write(errp[1], &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: whichever runs first, the group exists before any kill
  ::close(out[1]);
  ::close(errp[1]);
  int exec_errno = 0;
  ssize_t got = ::read(errp[0], &exec_errno, sizeof exec_errno);  // 0 bytes: exec succeeded
  ::close(errp[0]);
  CommandResult r;
  r.argv = argv;
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    return sys_error(argv[0], "cannot execute", exec_errno);
  }
  const auto deadline = start + timeout;
  bool exited = false, eof = false;
  int status = 0;
  char buf[4096];
  for (;;) {
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
    auto now = Clock::now();
    if (!exited && now >= deadline) {
      ::kill(-pid, SIGKILL);  // the whole group: a stop script's children must not linger
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    // After exit, only drain what is already buffered: a daemon it left behind may hold the pipe.
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    int wait_ms = exited ? 0 : static_cast<int>(std::min<std::int64_t>(50, left_ms));
    pollfd p{out[0], POLLIN, 0};
    int pr = ::poll(&p, eof ? 0 : 1, wait_ms);  // at EOF this is just a short sleep
    if (pr > 0) {
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n > 0) {
        append_tail(r.output_tail, buf, static_cast<std::size_t>(n), tail_bytes);
        continue;
      }
      if (n == 0) eof = true;
    }
    if (exited) break;
  }
  ::close(out[0]);
  set_status(r, status);
  r.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  return r;
}

}  // namespace tandem::agent
