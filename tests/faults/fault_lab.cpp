#include "fault_lab.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <thread>

namespace faulttest {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {
// The old lane is up within a second when it comes; a rollback that cannot start it (its agent is
// down) fails after this, not after the 30 s an operator's manifest would give it.
ClusterOptions quick_verify(ClusterOptions o) {
  o.verify_timeout = "10s";
  return o;
}
}  // namespace

FaultLab::FaultLab(ClusterOptions o) : c(quick_verify(o)) {
  c.start_old_lane();
  // `plan` takes no state or PKI dir (Cluster::ctl adds them): run it as is.
  const fs::path plan = c.dir / "plan.json";
  const std::string cmd = std::string(TANDEMCTL_BIN) + " plan " + c.manifest_path() + " -o json > " + plan.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  const json parsed = json::parse(slurp(plan));
  for (const auto& s : parsed["steps"])
    steps.push_back({s["index"].get<int>(), s["node"].get<std::string>(), s["action"].get<std::string>()});
  REQUIRE_FALSE(steps.empty());
}

std::vector<PlanStep> FaultLab::one_per_action() const {
  std::vector<PlanStep> out;
  for (const auto& s : steps) {
    bool seen = false;
    for (const auto& o : out) seen = seen || o.action == s.action;
    if (!seen || s.action == "engine.start") out.push_back(s);
  }
  return out;
}

const PlanStep& FaultLab::step(const std::string& action, const std::string& node) const {
  for (const auto& s : steps)
    if (s.action == action && (node.empty() || s.node == node)) return s;
  FAIL("the plan has no step " << action << " on " << node);
  throw;  // not reached: FAIL throws
}

int FaultLab::node_index(const std::string& node) { return node == "rank1" ? 1 : 0; }

pid_t FaultLab::start_paused(const std::string& verb, const std::string& point) {
  const fs::path marker = c.bind_dir() / "paused";
  fs::remove(marker);
  const pid_t pid = c.ctl_background({verb, c.manifest_path()}, c.dir / "paused-ctl.log", {"TANDEM_FAULT_PAUSE=" + point});
  const auto end = Clock::now() + 90s;
  while (Clock::now() < end) {
    if (slurp(marker) == point + "\n") return pid;
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) FAIL("tandemctl " << verb << " ended before reaching " << point << ":\n" << log());
    std::this_thread::sleep_for(20ms);
  }
  kill_controller(pid);
  FAIL("tandemctl " << verb << " did not reach " << point << " within 90 s:\n" << log());
  return -1;
}

void FaultLab::resume() { fs::remove(c.bind_dir() / "paused"); }

void FaultLab::kill_controller(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  fs::remove(c.bind_dir() / "paused");
}

int FaultLab::wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) != pid) {
    if (Clock::now() > end) {
      kill_controller(pid);
      FAIL("tandemctl did not finish within " << limit.count() << " s:\n" << log());
    }
    std::this_thread::sleep_for(50ms);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

json FaultLab::status() const {
  std::string out;
  c.ctl({"status", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out);
  return json::parse(out);
}

json FaultLab::last_report() const {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(c.bind_dir() / "reports"))
    if (e.path().extension() == ".json" && (newest.empty() || fs::last_write_time(e) >= fs::last_write_time(newest)))
      newest = e.path();
  REQUIRE_FALSE(newest.empty());
  return json::parse(slurp(newest));
}

bool FaultLab::old_lane_running() const {
  const std::string pid = slurp(c.dir / "old.pid");
  if (pid.empty()) return false;
  const std::string cmd = slurp("/proc/" + std::to_string(std::stoi(pid)) + "/cmdline");
  return cmd.find("tandem-serve") != std::string::npos && cmd.find("--node-rank") == std::string::npos;
}

bool FaultLab::ranks_gone(int i, std::chrono::milliseconds limit) const {
  const auto end = Clock::now() + limit;
  while (!c.ranks(i).empty()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

void FaultLab::require_bound() const {
  const int nodes = static_cast<int>(c.agent_ports.size());
  for (int i = 0; i < nodes; ++i) CHECK_MESSAGE(c.ranks(i).size() == 1, "node " << i << " runs " << c.ranks(i).size() << " ranks");
  CHECK(port_answers(c.serve_port));
  CHECK_FALSE(old_lane_running());
  CHECK(c.stop_count() == stops_at_start_ + 1);  // the old lane was stopped once, never twice
  const json st = status();
  for (const auto& n : st["nodes"]) {
    // "adopted": a restarted agent's name for the rank its predecessor started (adopted through
    // rank.json: watched through /proc, stopped the same way).
    CHECK_MESSAGE((n["engine"]["phase"] == "ready" || n["engine"]["phase"] == "adopted"), n.dump());
    CHECK_MESSAGE(n["deadman"]["armed"] == false, n.dump());
  }
}

void FaultLab::require_restored() {
  const int nodes = static_cast<int>(c.agent_ports.size());
  for (int i = 0; i < nodes; ++i) {
    CHECK_MESSAGE(ranks_gone(i, 3s), "an engine rank is left on node " << i);  // no orphan
    CHECK(c.crontab(i) == c.expected_crontab());                                // byte for byte
  }
  CHECK(old_lane_running());
  CHECK(port_answers(c.serve_port));
  // One old lane: started by the test, and again only by a rollback after a stop (never twice).
  CHECK(c.start_count() == 1 + c.stop_count());
  const json st = status();
  for (const auto& n : st["nodes"]) CHECK_MESSAGE(n["deadman"]["armed"] == false, n.dump());
  stops_at_start_ = c.stop_count();
}

void FaultLab::roll_back_to_old_lane() {
  std::string out;
  const int rc = ctl("rollback", out);
  INFO("tandemctl rollback:\n" << out);
  CHECK(rc == 0);
  require_restored();
}

}  // namespace faulttest
