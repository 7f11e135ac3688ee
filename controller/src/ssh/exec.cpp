// Session::exec: one channel per command; stdout and stderr are drained together so a chatty
// stderr cannot stall the remote side while we wait on stdout.
#include <memory>

#include "session_impl.hpp"

namespace tandem::ssh {

Result<ExecResult> Session::exec(const std::string& command, std::chrono::milliseconds timeout) {
  ssh_session s = impl_->session;
  std::unique_ptr<ssh_channel_struct, void (*)(ssh_channel)> ch(ssh_channel_new(s), [](ssh_channel c) {
    if (!c) return;
    if (ssh_channel_is_open(c)) ssh_channel_close(c);
    ssh_channel_free(c);
  });
  if (!ch) return Error{where() + ": cannot make an SSH channel: " + impl_->last_error()};
  if (ssh_channel_open_session(ch.get()) != SSH_OK)
    return Error{where() + ": cannot open an SSH session channel: " + impl_->last_error()};
  if (ssh_channel_request_exec(ch.get(), command.c_str()) != SSH_OK)
    return Error{where() + ": the server refused to run a command: " + impl_->last_error()};
  ssh_channel_send_eof(ch.get());  // nothing on stdin

  ExecResult r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[16384];
  for (;;) {
    bool progressed = false;
    for (int is_stderr : {0, 1}) {
      const int n = ssh_channel_read_nonblocking(ch.get(), buf, sizeof buf, is_stderr);
      if (n == SSH_ERROR) return Error{where() + ": reading a command's output failed: " + impl_->last_error()};
      if (n > 0) {
        (is_stderr ? r.err : r.out).append(buf, static_cast<std::size_t>(n));
        progressed = true;
      }
    }
    if (progressed) continue;
    if (ssh_channel_is_eof(ch.get()) || !ssh_channel_is_open(ch.get())) break;
    if (std::chrono::steady_clock::now() >= deadline)
      return Error{where() + ": the command did not finish within " +
                   std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) + " s"};
    // Waits for stdout data or EOF; stderr that arrives meanwhile is buffered and read next round.
    if (ssh_channel_poll_timeout(ch.get(), 100, 0) == SSH_ERROR)
      return Error{where() + ": waiting for a command's output failed: " + impl_->last_error()};
  }
  r.exit_status = ssh_channel_get_exit_status(ch.get());
  if (r.exit_status < 0) return Error{where() + ": the command ended without an exit status (killed by a signal?)"};
  return r;
}

}  // namespace tandem::ssh
