// kill -9 of a node's tandemd at each step of a TP2 bind. Restarted at once (systemd's Restart=),
// the agent must pick up where it was from its state dir: journal (ops replayed, not redone), the
// manifest, the dead-man's deadline and the running rank (adopted through rank.json), so the bind
// goes on and serves. Left down, the bind fails and says so, the other node's dead-man stays
// armed; once the agent is back, `tandemctl rollback` restores the old lane with no orphan rank.
#include <doctest/doctest.h>

#include "fault_lab.hpp"

using namespace faulttest;

TEST_CASE("agent: killed before each step and restarted at once; the bind goes on and serves") {
  FaultLab lab({.nodes = 2});
  const auto steps = lab.one_per_action();
  for (const auto& s : steps) {
    if (s.node == "controller") continue;  // no agent acts in it: the same as before the next step
    CAPTURE(s.name());
    const int victim = FaultLab::node_index(s.node);
    const pid_t ctl = lab.start_paused("bind", "before:" + std::to_string(s.index));
    lab.c.restart_agent(victim);
    lab.resume();
    const int rc = lab.wait_exit(ctl);
    INFO("bind:\n" << lab.log());
    CHECK(rc == 0);
    lab.require_bound();
    lab.roll_back_to_old_lane();
  }
}

TEST_CASE("agent: down from a step to the end of the bind; the bind fails, rollback restores once it is back") {
  FaultLab lab({.nodes = 2});
  // Before the outage (the other node's dead-man armed), mid-outage (the old lane stopped, the
  // node that would restart it unreachable), and with the rank running on the unreachable node.
  for (const auto& s : {lab.step("deadman.arm", "rank0"), lab.step("stop.verify", "rank0"), lab.step("engine.wait_ready", "rank1")}) {
    CAPTURE(s.name());
    const int victim = FaultLab::node_index(s.node);
    const pid_t ctl = lab.start_paused("bind", "before:" + std::to_string(s.index));
    lab.c.kill_agent(victim);
    lab.resume();
    const int rc = lab.wait_exit(ctl);
    INFO("bind:\n" << lab.log());
    CHECK(rc == 3);
    CHECK(lab.log().find("rank" + std::to_string(victim) + " (127.0.0." + std::to_string(victim + 1)) != std::string::npos);
    lab.c.restart_agent(victim);
    lab.roll_back_to_old_lane();
  }
}
