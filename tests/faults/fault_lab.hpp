// The fault matrix's fixture: the tests/bind cluster (two real tandemd agents, the real CPU
// tandem-serve, an old lane on the serving port) plus what every fault case needs: the bind's plan
// as data, a controller stopped at a named point (TANDEM_FAULT_PAUSE), and the two ends a fault
// may lead to, checked the same way every time:
//   bound     every node runs its one rank, the head serves, the old lane is stopped, no dead-man armed;
//   restored  the old lane answers, crontabs are byte-identical to before, no engine rank is left
//             on any node (no orphan), no dead-man armed.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bind_cluster.hpp"

namespace faulttest {

using namespace bindtest;
using nlohmann::json;

struct PlanStep {
  int index = 0;
  std::string node, action;
  std::string name() const { return std::to_string(index) + " " + action + " on " + node; }
};

class FaultLab {
 public:
  explicit FaultLab(ClusterOptions o);

  Cluster c;
  std::vector<PlanStep> steps;  // `tandemctl plan -o json` of this cluster's manifest

  // One step per kind of action (its first), and every engine.start: the matrix's rows. Steps of
  // one action on the other node run the same controller and agent code.
  std::vector<PlanStep> one_per_action() const;
  // The first step with `action` (on `node`, when given).
  const PlanStep& step(const std::string& action, const std::string& node = "") const;
  // Node index of a step's node; controller steps act for the head (0).
  static int node_index(const std::string& node);

  // `tandemctl VERB manifest` in the background, stopped at `point` (see controller/src/bind/fault_pause.hpp);
  // returns its pid once it waits there.
  pid_t start_paused(const std::string& verb, const std::string& point);
  void resume();                      // lets a paused controller go on
  void kill_controller(pid_t pid);    // kill -9, reaped
  // The exit code of a background tandemctl (its log in the INFO context on failure).
  int wait_exit(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(120));
  std::string log() const { return slurp(c.dir / "paused-ctl.log"); }

  int ctl(const std::string& verb, std::string& out) const { return c.ctl({verb, c.manifest_path()}, out); }
  json status() const;
  json last_report() const;  // the newest report's JSON

  bool old_lane_running() const;  // the process the old lane's pid file names is alive
  // The checks of the two ends. Cases follow each other on one cluster, each from the restored
  // state the one before it ended in; require_restored marks that state as the next case's start.
  void require_bound() const;
  void require_restored();
  // From bound: `tandemctl rollback`, then restored.
  void roll_back_to_old_lane();
  // Waits up to `limit` until node i runs no engine rank; true if none is left.
  bool ranks_gone(int i, std::chrono::milliseconds limit) const;

 private:
  int stops_at_start_ = 0;  // the stop command's runs when this case began
};

}  // namespace faulttest
