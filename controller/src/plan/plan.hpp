// The ordered steps of a bind. `plan` prints them; `bind` will execute exactly this list, so the
// two can never disagree about what happens, in which order, on which node.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "plan_action.hpp"
#include "tandem/manifest.hpp"

namespace tandem {

struct Step {
  int index = 0;          // 1-based position in the bind
  std::string phase;      // preflight, arm, outage, hygiene, verify, launch, serve, gates, finish
  std::string node;       // node name, or "controller"
  Action action = Action::preflight;
  std::string gate;       // Action::gate: the gate's name as the gate runner reports it ("health", "custom.x")
  std::string summary;    // one line for a person
  std::vector<std::pair<std::string, std::string>> details;  // what it checks / uses
  std::vector<std::string> argv;                              // command it runs, if any
  std::string undo;       // how rollback reverses it; empty when nothing to undo

  // The action's stable id for scripts, journals and the saved plan: "hygiene.shm", "gate.health".
  std::string id() const { return action_id(action, gate); }
};

struct Plan {
  std::string name;
  std::string file;
  std::vector<Step> steps;
  std::vector<Step> on_failure;  // rollback: undo in reverse, then the rollback lane
};

Plan make_plan(const Manifest& m);

std::string render_plan_text(const Plan& p);
nlohmann::ordered_json plan_to_json(const Plan& p);

}  // namespace tandem
