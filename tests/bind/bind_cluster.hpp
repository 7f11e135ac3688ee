// A bind test cluster on this machine: one or two real tandemd agents (rank0 on 127.0.0.1, rank1
// on 127.0.0.2), each with its own sandbox root (crontab, /dev/shm, /proc stand-ins, the engine
// binary and a demo model), a PKI from the net API, an "old lane" (the real tandem-serve on the
// serving port, stopped by the manifest's stop command, restarted by its rollback command), and
// tandemctl run as a process with its own state dir.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "free_port.hpp"

namespace bindtest {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p);
void write(const fs::path& p, const std::string& s);
using tandem::test::free_port;
bool port_answers(std::uint16_t port);  // GET /health on 127.0.0.1 answers 200
// Processes whose command line contains `needle` (orphan checks).
std::vector<pid_t> processes_with(const std::string& needle);

struct ClusterOptions {
  int nodes = 1;
  bool hang_worker = false;   // the worker's engine never becomes ready (sleeps)
  int stop_sleep_s = 0;       // the stop command sleeps this long first (a window to kill the controller in)
  std::string deadman = "10m";
  std::string verify_timeout = "30s";  // how long a rollback waits for the old lane to answer
  // Gates: "off"; "on" (health, models, chat, tool_call, json: what the demo model can pass);
  // "needle" (also a 256-token retrieval that must find its needle: random weights cannot);
  // "bench" (health and a short bench at concurrency 2: no speed floor, zero failures allowed);
  // "custom" (health, an HTTP custom gate on /v1/models, a command gate the head's agent runs) and
  // "custom_fail" (the same, but the command's output lacks what the gate expects).
  std::string gates = "off";
  std::string stage{};  // a `stage:` section appended to the manifest as is; empty: none
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions o);
  ~Cluster();

  std::string manifest_path() const { return (dir / "bind.yaml").string(); }
  fs::path root(int i) const { return dir / ("rank" + std::to_string(i)); }
  std::string crontab(int i) const { return slurp(root(i) / "etc/crontab"); }
  const std::string original_crontab = "SHELL=/bin/sh\n*/5 * * * * root curl -sf localhost:SERVE_PORT/health || /opt/old/restart.sh\n# keep me\n";
  std::string expected_crontab() const;

  // tandemctl ARGS (state and PKI dirs added), output (stdout+stderr) into `out`; returns the exit code.
  int ctl(const std::vector<std::string>& args, std::string& out, bool split_stdout = false) const;
  // The same, not waited for; `env` ("NAME=value") is added to its environment.
  pid_t ctl_background(const std::vector<std::string>& args, const fs::path& log, const std::vector<std::string>& env = {}) const;
  std::string journal() const { return slurp(state / "bindtest/journal.jsonl"); }
  fs::path bind_dir() const { return state / "bindtest"; }

  void start_old_lane();
  int stop_count() const;   // how many times the stop command ran
  int start_count() const;  // how many times the old lane was started (by the test or a rollback command)

  // kill -9 node i's tandemd (and reap it); start it again as systemd's Restart= would.
  void kill_agent(int i);
  void restart_agent(int i);
  // Node i's engine ranks (tandem-serve started by its agent: they carry --node-rank).
  std::vector<pid_t> ranks(int i) const;

  fs::path dir, pki, state;
  std::uint16_t serve_port = 0, rendezvous_port = 0;
  std::vector<std::uint16_t> agent_ports;
  std::vector<pid_t> agents;

 private:
  void start_agent(int i);
  std::string old_lane_command() const;
  ClusterOptions opt_;
};

}  // namespace bindtest
