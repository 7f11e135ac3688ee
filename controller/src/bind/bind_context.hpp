// Everything one bind (or rollback) run works with: the manifest and its plan, a client per
// node, the controller's journal and what it says about this run, and the progress display.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "agent_client.hpp"
#include "bind_journal.hpp"
#include "plan/plan.hpp"
#include "progress_display.hpp"
#include "stage_push.hpp"

namespace tandem::ctl {

struct BindContext {
  const Manifest& m;
  std::string manifest_yaml;  // sent to every agent as is
  Plan plan;
  std::map<std::string, AgentClient> agents;  // by node name
  BindJournal& journal;
  BindRun run;  // this run so far; kept in step with the journal
  Progress& progress;
  std::string bind_dir;  // <state dir>/<bind name>: journal and reports
  // The gates run once, at the first gate step; each gate step reports its own result from here.
  bool gates_ran = false;
  std::map<std::string, json> gate_results;  // gate name -> {passed, detail, seconds, evidence}
  // Asked once, after preflight and before the first step that changes a node (the dead-man's arm,
  // then the outage); false ends the bind "aborted" with nothing changed. Unset: no question
  // (not a terminal, or --yes).
  std::function<bool()> confirm_outage;
  // stage.from: controller: this machine's files and the pushers (stage_push.hpp); else null.
  std::shared_ptr<StagePush> stage_push;

  const AgentClient& agent(const std::string& node) const { return agents.at(node); }
  // Append to the journal and fold the record into `run`; a journal that cannot be written stops
  // the bind (acting without a record would break resume).
  Status record(json rec);
  // Op ids: stable per bind id and step, so a resumed controller sends the same ones.
  std::string op_for_step(int index) const { return run.bind_id + "-" + std::to_string(index); }
  std::string op_for(const std::string& node, const std::string& what) const;
};

// What one step did: evidence for the journal and report, a short note for the display.
struct StepOutcome {
  bool ok = false;
  json evidence;
  std::string note;
  std::string error;  // when !ok: which node, which call, why
  static StepOutcome success(json evidence, std::string note = {}) { return {true, std::move(evidence), std::move(note), {}}; }
  static StepOutcome failure(std::string error, json evidence = nullptr) { return {false, std::move(evidence), {}, std::move(error)}; }
};

// Runs one plan step (its action) against the agents or locally.
StepOutcome run_step(BindContext& ctx, const Step& step);

}  // namespace tandem::ctl
