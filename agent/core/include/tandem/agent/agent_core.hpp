// What tandemd does to a node, without the network: the node root, the journal and the six
// hygiene steps, with journaling and op-id idempotency in one place (run_apply/verify/undo).
//
// Every phase returns {"op_id","step","phase","replayed","evidence"}; "replayed" is true when the
// op id had already reached that phase and the recorded evidence is returned instead of acting.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/agent/journal.hpp"
#include "tandem/agent/node_root.hpp"
#include "tandem/agent/stage_step.hpp"
#include "tandem/agent/step.hpp"
#include "tandem/manifest.hpp"

namespace tandem::agent {

struct CoreOptions {
  std::string root = "/";                     // host paths resolve under this prefix
  std::string state_dir = "/var/lib/tandemd";  // host path (under root): journal, blobs, hash cache
  Engine engine;
  Hygiene hygiene;
  // Stop commands for THIS node (the caller applies Manifest::selects); unset: hygiene.stop as is.
  std::optional<std::vector<Command>> stop_commands;
  // The stage section and what it names (Manifest::staged_paths); no step "stage" without it.
  std::optional<Stage> stage;
  std::vector<StagedPath> staged_paths;
  std::shared_ptr<StageSource> stage_source;  // null: the stage step can only undo
  std::shared_ptr<StageProgress> stage_progress;
};

class AgentCore {
 public:
  static constexpr const char* kSteps[] = {"cron", "stop", "shm", "page_cache", "cache_dir", "sha"};

  // Opens the root, creates the state dir (0700) if missing, replays the journal.
  static Result<std::unique_ptr<AgentCore>> open(const CoreOptions& opts);

  Result<json> check(const std::string& step);
  Result<json> apply(const std::string& step, const std::string& op_id);
  Result<json> verify(const std::string& op_id);
  Result<json> undo(const std::string& op_id);
  // Undo every op with an intent and no "undone", newest first (after a crash or for rollback).
  // Evidence: {"undone":[result...],"errors":[error...]}; an Error (with that evidence) if any failed.
  Result<json> undo_incomplete();
  // Frees the backups of every verified, not yet undone stage op but those in `keep` or whose id
  // starts with one of `keep_prefixes`, and journals them "released" (kept for good;
  // undo_incomplete passes them by). A stage op that never verified keeps its backups: it may
  // still need undoing. Evidence: {"released":[{"op_id","files","freed_bytes"}...],"freed_bytes","kept":[op...]}
  Result<json> release_stage(const std::vector<std::string>& keep, const std::vector<std::string>& keep_prefixes = {});

  Step* step(const std::string& name);
  Journal& journal() { return *journal_; }
  const NodeRoot& root() const { return root_; }

 private:
  AgentCore(NodeRoot root, std::unique_ptr<Journal> journal) : root_(std::move(root)), journal_(std::move(journal)) {}
  Result<std::string> step_of(const std::string& op_id) const;
  StepContext ctx(const std::string& op_id) { return StepContext{root_, *journal_, op_id}; }
  Result<json> fail(const std::string& op_id, const std::string& step, const char* during, Error e);

  NodeRoot root_;
  std::unique_ptr<Journal> journal_;
  std::map<std::string, std::unique_ptr<Step>> steps_;
};

}  // namespace tandem::agent
