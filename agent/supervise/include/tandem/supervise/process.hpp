// The process runner: the only way the agent starts anything. An argv (absolute argv[0], never a
// shell), an explicit environment, its own session and process group (so a stop reaches every
// process the engine forked), optionally a run user, output appended to a log file, and no agent
// file descriptor leaking into the child.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/result.hpp"
#include "tandem/units.hpp"

namespace tandem::supervise {

using Env = std::vector<std::pair<std::string, std::string>>;

// The fixed base environment for anything the agent runs (PATH, LANG); the agent's own
// environment is never passed through, so what a rank sees is what the manifest says.
Env base_env();

struct ExitStatus {
  enum class Kind { exited, signaled, unknown };
  Kind kind = Kind::unknown;  // unknown: not our child (an adopted orphan), so no wait status
  int code = 0;               // when exited
  int signal = 0;             // when signaled

  bool success() const { return kind == Kind::exited && code == 0; }
  std::string str() const;  // "exit code 3", "signal 9 (Killed)", "unknown (not our child)"
  static ExitStatus from_wait_status(int wstatus);
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] must be absolute
  Env env;                        // the child's whole environment
  std::string run_user;           // empty: as the agent; else switch to this user (root only)
  std::string log_path;           // stdout+stderr appended (O_APPEND, created 0640); empty: /dev/null
  std::string cwd = "/";
};

struct Child {
  pid_t pid = -1;
  pid_t pgid = -1;  // == pid: the child leads its own session and group
  std::chrono::system_clock::time_point started_at;
};

// Start the child. Returns once it has exec'd (or with the reason it could not: unknown user,
// setuid refused, execve failed -- reported from the child through a close-on-exec pipe).
Result<Child> spawn(const SpawnOptions& options);

// Same, but stdout+stderr go to `output_fd` (the caller keeps ownership).
Result<Child> spawn_to_fd(const SpawnOptions& options, int output_fd);

// Reap `pid` if it exits within `timeout`; nullopt if it is still running.
Result<std::optional<ExitStatus>> wait_for(pid_t pid, Duration timeout);

// SIGTERM the whole group, wait up to `grace` for `leader_gone()` and for every other member to be
// gone, then SIGKILL the group and wait (bounded) again. Returns false if something survived.
bool kill_group(pid_t pgid, Duration grace, const std::function<bool()>& leader_gone);

// kill_group for our own child: also reaps the leader and reports how it ended.
Result<ExitStatus> terminate_group(const Child& child, Duration grace);

// Run to completion with a timeout, capturing stdout+stderr (for stop and rollback commands).
struct RunOptions {
  std::vector<std::string> argv;
  Env env = base_env();
  std::string run_user;
  Duration timeout = std::chrono::minutes(5);
  Duration kill_grace = std::chrono::seconds(5);
  std::size_t max_output = 64 * 1024;  // keep the last this many bytes
};

struct RunResult {
  ExitStatus status;
  bool timed_out = false;  // killed (with its group) at the timeout
  std::string output;      // the tail of stdout+stderr
  bool output_truncated = false;
  Duration elapsed{0};
};

Result<RunResult> run_capture(const RunOptions& options);

}  // namespace tandem::supervise
