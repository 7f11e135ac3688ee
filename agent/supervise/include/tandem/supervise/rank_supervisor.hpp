// The engine rank on this node: start it (argv from the manifest) in its own process group under
// the run user, say when it is ready (its port accepts connections), notice at once when it dies,
// tail its log, stop it (TERM, then KILL after a grace). The running rank is recorded in the state
// dir so a restarted agent finds and stops a rank its predecessor left behind.
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/manifest.hpp"
#include "tandem/supervise/process.hpp"
#include "tandem/supervise/rank_state.hpp"

namespace tandem::supervise {

struct RankSpec {
  std::vector<std::string> argv;
  Env env = base_env();
  std::string run_user;
  std::string log_path;
  std::string cwd = "/";
  std::string ready_host = "127.0.0.1";  // the port that proves the rank is up
  int ready_port = 0;

  // The rank for `node`: serve_argv/serve_env, the manifest's run user; ready when the head's
  // HTTP port (serve.port on loopback) or the worker's rendezvous port (on its fabric address) accepts.
  static RankSpec from_manifest(const Manifest& m, const Node& node, std::string log_path);
};

enum class RankPhase {
  idle,      // nothing started (or the last rank was cleaned up)
  starting,  // running, port not yet proven
  ready,     // running, port accepted a connection
  exited,    // ended; `exit` says how
  adopted,   // found running from a previous agent (not our child: no wait status); stop() works
};
const char* to_string(RankPhase p);

struct RankStatus {
  RankPhase phase = RankPhase::idle;
  pid_t pid = -1;
  pid_t pgid = -1;
  std::uint64_t start_ticks = 0;
  std::chrono::system_clock::time_point started_at;
  std::string log_path;
  std::optional<ExitStatus> exit;  // when exited
  bool stop_requested = false;     // exited because stop() asked; otherwise the exit was unexpected
};

class RankSupervisor {
 public:
  // Loads <state_dir>/rank.json. A recorded rank that is still the same process (boot id and
  // /proc start time match) is reported as `adopted`; a stale record is removed.
  static Result<std::unique_ptr<RankSupervisor>> open(std::string state_dir);
  // Stops watching but leaves the rank running, exactly like a crashed agent; the next open()
  // finds it through the state file.
  ~RankSupervisor();
  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;

  // Refuses while a rank (ours or an orphan) is running.
  Result<RankStatus> start(const RankSpec& spec);
  // Poll the ready port until it accepts or `timeout`; fails early (with the log tail) if the
  // rank exits first.
  Result<RankStatus> wait_ready(Duration timeout);
  RankStatus status() const;
  // Block until the rank is no longer running or `timeout` passes; returns the status then.
  RankStatus wait_exit(Duration timeout);
  // TERM the rank's group, KILL after `grace`. For an orphan, only after proving it is the same
  // process. Stopping when nothing runs is not an error.
  Result<RankStatus> stop(Duration grace);
  Result<std::vector<std::string>> tail(std::size_t lines) const;
  // Called from the reaper thread when the rank exits (expected or not).
  void on_exit(std::function<void(const RankStatus&)> callback);

 private:
  explicit RankSupervisor(std::string state_dir);
  void reap_loop(pid_t pid, pid_t pgid);
  void join_reaper();
  Result<RankStatus> stop_orphan(Duration grace);

  std::string state_dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RankStatus status_;
  std::string ready_host_;
  int ready_port_ = 0;
  bool closing_ = false;
  std::function<void(const RankStatus&)> on_exit_;
  std::thread reaper_;
};

}  // namespace tandem::supervise
