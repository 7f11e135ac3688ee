// kill -9 of an engine rank (tandem-serve) at each step of a TP2 bind from its start on: the bind
// must notice, stop the other rank (no orphan) and put the old lane back. And a serving lane that
// loses a rank: the surviving rank ends within seconds on its own, and rollback restores.
#include <doctest/doctest.h>
#include <signal.h>

#include <thread>

#include "fault_lab.hpp"

using namespace faulttest;
using namespace std::chrono_literals;

namespace {

void kill_ranks(const Cluster& c, int node) {
  const auto pids = c.ranks(node);
  REQUIRE_MESSAGE(pids.size() == 1, "node " << node << " runs " << pids.size() << " ranks");
  ::kill(pids[0], SIGKILL);
}

}  // namespace

TEST_CASE("rank: the worker or the head killed before each step after its start; the bind rolls back") {
  FaultLab lab({.nodes = 2});
  for (const std::string node : {"rank1", "rank0"}) {
    const int victim = FaultLab::node_index(node);
    const int started = lab.step("engine.start", node).index;
    for (const auto& s : lab.steps) {
      if (s.index <= started) continue;
      CAPTURE(node);
      CAPTURE(s.name());
      const pid_t ctl = lab.start_paused("bind", "before:" + std::to_string(s.index));
      kill_ranks(lab.c, victim);
      lab.resume();
      const int rc = lab.wait_exit(ctl);
      INFO("bind:\n" << lab.log());
      CHECK(rc == 3);
      const json report = lab.last_report();
      CHECK(report["result"] == "rolled_back");
      CHECK(report["failed_step"]["index"].get<int>() >= s.index);
      lab.require_restored();
    }
  }
}

TEST_CASE("rank: a serving TP2 lane loses a rank; the other ends within seconds, rollback restores") {
  FaultLab lab({.nodes = 2});
  for (const int victim : {1, 0}) {
    CAPTURE(victim);
    std::string out;
    REQUIRE(lab.ctl("bind", out) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    kill_ranks(lab.c, victim);
    CHECK(lab.ranks_gone(1 - victim, 15s));
    MESSAGE("the surviving rank ended after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count() << " ms");
    lab.roll_back_to_old_lane();
  }
}
