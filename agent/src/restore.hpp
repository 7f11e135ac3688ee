// Putting a node back: stop the rank this agent started, then undo every journaled hygiene op
// that is not undone yet, newest first. The dead-man runs this as its first rollback command
// (`tandemd restore ...`), so it works even when the daemon itself is dead.
#pragma once
#include <memory>
#include <string>

#include "daemon.hpp"
#include "tandem/agent/agent_core.hpp"

namespace tandem::agentd {

// The hygiene core for this node's share of the manifest (its own stop commands). Without a
// stage source its stage step can only undo (what restore and the dead-man need).
Result<std::unique_ptr<agent::AgentCore>> open_core(const Manifest& m, const DaemonOptions& opts,
                                                           std::shared_ptr<agent::StageSource> source = nullptr,
                                                           std::shared_ptr<agent::StageProgress> progress = nullptr);

// A sandboxed node (root != "/") runs the engine on the files under its root: the binary, model,
// drafter, chat template and cache dir are rebased there, matching what the sha step hashes.
Manifest rebase_engine_paths(const Manifest& m, const std::string& root);

// The argv the dead-man runs before the manifest's rollback commands.
Command restore_command(const DaemonOptions& opts);

// `tandemd restore`: returns a process exit code and prints what it did as JSON.
int run_restore(const DaemonOptions& opts);

}  // namespace tandem::agentd
