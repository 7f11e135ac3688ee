// Putting the old lane back (the plan's on_failure): stop the ranks, undo the bind's changes in
// reverse, start the rollback lane, verify it answers, then disarm the dead-men. Every task is
// journaled, so a rollback interrupted by a killed controller is finished by the next one.
//
// Where the list of changes comes from:
//   bind_failure  this run's journal (the steps it began), then each agent's own journal as a
//                 safety net for anything begun but not recorded;
//   agents        each agent's journal alone (`tandemctl rollback`): every change not yet undone;
//   local         this controller's journal alone (`tandemctl rollback --local`), on the agents
//                 that answer; unreachable ones are reported (their dead-man restores them).
// The dead-men stay armed until the old lane verifies: if the rollback fails they try again.
#pragma once
#include "bind_context.hpp"

namespace tandem::ctl {

enum class RollbackSource { bind_failure, agents, local };

struct RollbackResult {
  bool ok = true;
  std::vector<std::string> problems;  // one line each: task, node, why
};

RollbackResult run_rollback(BindContext& ctx, RollbackSource source);

}  // namespace tandem::ctl
