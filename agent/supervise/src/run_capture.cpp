// run_capture: a command run to completion with a timeout, output captured through a pipe.
// Used for stop and rollback commands, whose exit status and output tail become evidence.
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "tandem/supervise/process.hpp"

namespace tandem::supervise {

Result<RunResult> run_capture(const RunOptions& o) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys_error("pipe").with_context("run " + (o.argv.empty() ? "" : o.argv[0]));
  SpawnOptions so;
  so.argv = o.argv;
  so.env = o.env;
  so.run_user = o.run_user;
  auto child = spawn_to_fd(so, p[1]);
  ::close(p[1]);  // only the child holds the write end now, so EOF means it (and its group) closed it
  if (!child) {
    ::close(p[0]);
    return child.error();
  }

  RunResult res;
  auto keep = [&](const char* data, std::size_t n) {
    res.output.append(data, n);
    if (res.output.size() > 2 * o.max_output) {  // trim in batches, not on every read
      res.output.erase(0, res.output.size() - o.max_output);
      res.output_truncated = true;
    }
  };
  std::optional<ExitStatus> status;
  bool eof = false;
  const auto deadline = start + o.timeout;
  std::optional<clock::time_point> drain_until;
  while (!eof) {
    auto now = clock::now();
    if (!status && now >= deadline) break;
    // After the leader exits, read what is left for a moment; a background grandchild that keeps
    // the pipe open must not hold the agent hostage.
    if (status && drain_until && now >= *drain_until) break;
    pollfd pfd{p[0], POLLIN, 0};
    int r = ::poll(&pfd, 1, 20);
    if (r < 0 && errno != EINTR) break;
    if (r > 0) {
      char buf[4096];
      ssize_t n = ::read(p[0], buf, sizeof buf);
      if (n > 0) keep(buf, static_cast<std::size_t>(n));
      else if (n == 0) eof = true;
      else if (errno != EINTR && errno != EAGAIN) eof = true;
    }
    if (!status) {
      int ws = 0;
      if (::waitpid(child->pid, &ws, WNOHANG) == child->pid) {
        status = ExitStatus::from_wait_status(ws);
        drain_until = clock::now() + std::chrono::milliseconds(200);
      }
    }
  }
  ::close(p[0]);
  if (!status) {
    if (eof) {  // output closed, leader not yet reaped: give it the rest of the timeout
      auto w = wait_for(child->pid, std::max(Duration(0), std::chrono::duration_cast<Duration>(deadline - clock::now())));
      if (w.ok() && w.value()) status = *w.value();
    }
    if (!status) {
      res.timed_out = true;
      auto t = terminate_group(child.value(), o.kill_grace);
      if (!t) return t.error().with_context("run " + o.argv[0] + " (timed out after " + format_duration(o.timeout) + ")");
      status = t.value();
    }
  }
  if (res.output.size() > o.max_output) {
    res.output.erase(0, res.output.size() - o.max_output);
    res.output_truncated = true;
  }
  res.status = *status;
  res.elapsed = std::chrono::duration_cast<Duration>(clock::now() - start);
  return res;
}

}  // namespace tandem::supervise
