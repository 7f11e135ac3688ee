// kill -9 of tandemctl at every step of a TP2 bind, at the worst moment: the step has acted on the
// node but its step.done is not journaled. The next `tandemctl bind` must resume from the journals
// (steps acted on are replayed by the agents under the same op ids, never run twice) and serve;
// or, when the operator chooses `tandemctl rollback` instead, the old lane must come back. A
// controller killed during a rollback is finished by the next `tandemctl rollback`.
#include <doctest/doctest.h>

#include "fault_lab.hpp"

using namespace faulttest;

namespace {

// Every rollback task of the run in the journal, in order (their keys), for naming a case.
std::vector<std::string> rollback_keys(const std::string& journal) {
  std::vector<std::string> keys;
  std::istringstream in(journal);
  for (std::string line; std::getline(in, line);) {
    const json r = json::parse(line, nullptr, false);
    if (r.is_object() && r.value("event", "") == "rollback.task.begin") keys.push_back(r.value("key", ""));
  }
  return keys;
}

}  // namespace

TEST_CASE("controller: killed after each step of a TP2 bind acted; the next bind resumes and serves") {
  FaultLab lab({.nodes = 2});
  const auto steps = lab.one_per_action();
  for (const auto& s : steps) {
    CAPTURE(s.name());
    const pid_t ctl = lab.start_paused("bind", "after:" + std::to_string(s.index));
    lab.kill_controller(ctl);
    std::string out;
    const int rc = lab.ctl("bind", out);
    INFO("resumed bind:\n" << out);
    CHECK(rc == 0);
    CHECK(out.find("resuming bind") != std::string::npos);
    lab.require_bound();
    lab.roll_back_to_old_lane();
  }
}

TEST_CASE("controller: killed mid-bind, then the operator rolls back instead of resuming") {
  FaultLab lab({.nodes = 2});
  for (const auto& s : {lab.step("deadman.arm", "rank0"), lab.step("hygiene.cron", "rank1"), lab.step("stop.command", "rank0"),
                        lab.step("hygiene.sha256", "rank0"), lab.step("engine.start", "rank1"), lab.step("serve.wait")}) {
    CAPTURE(s.name());
    lab.kill_controller(lab.start_paused("bind", "after:" + std::to_string(s.index)));
    lab.roll_back_to_old_lane();
  }
}

TEST_CASE("controller: killed during the operator's rollback of a bound lane; rollback again restores") {
  FaultLab lab({.nodes = 2});
  std::string out;
  REQUIRE(lab.ctl("bind", out) == 0);
  // A reference rollback names the tasks; then each is the point of a kill in turn.
  lab.roll_back_to_old_lane();
  const std::vector<std::string> keys = rollback_keys(lab.c.journal().substr(lab.c.journal().rfind("\"bind.begin\"")));
  REQUIRE(keys.size() >= 6);
  for (size_t k = 1; k <= keys.size(); ++k) {
    CAPTURE(k);
    CAPTURE(keys[k - 1]);
    REQUIRE(lab.ctl("bind", out) == 0);
    lab.kill_controller(lab.start_paused("rollback", "rollback-after:" + std::to_string(k)));
    lab.roll_back_to_old_lane();
  }
}

TEST_CASE("controller: killed during a failed bind's own rollback; rollback again restores") {
  FaultLab lab({.nodes = 2});
  // A model file that differs between the ranks fails the bind at hashes.compare, after the
  // outage and hygiene: its rollback undoes every one of them.
  write(lab.c.root(1) / "models/tiny/generation_config.json", "{\"tampered\": true}\n");
  std::string out;
  REQUIRE(lab.ctl("bind", out) == 3);
  lab.require_restored();
  const std::string journal = lab.c.journal();
  const std::vector<std::string> keys = rollback_keys(journal);
  REQUIRE(keys.size() >= 10);
  for (size_t k = 1; k <= keys.size(); k += 3) {  // every third: the undo tasks are alike
    CAPTURE(keys[k - 1]);
    lab.kill_controller(lab.start_paused("bind", "rollback-after:" + std::to_string(k)));
    lab.roll_back_to_old_lane();
  }
}
