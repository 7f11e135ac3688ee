// Step "stage": make this node's engine files equal to the source's (manifest section `stage`).
//
// plan:   list the source (size, SHA-256, mtime of every file), compare with what is here (size,
//         then SHA-256 through the hash cache); files already equal are skipped. Each file to be
//         replaced is kept first: a hard link under the state dir (a copy when the state dir is on
//         another file system, within stage.backup_budget), its SHA-256 recorded; free space on
//         each target file system is checked. Nothing on the node changes before the intent.
// apply:  land every differing file (stage_landing.hpp), stage.parallel at a time; prune extras
//         only when stage.prune is set (they have backups too).
// verify: the landed files hash as the source listed them.
// undo:   every replaced or pruned file back from its backup, byte for byte (its SHA-256 checked),
//         files this op created removed, partials removed, directories it made removed if empty.
//
// Evidence (apply): {"source","files","copied","skipped","bytes","resumed_bytes","seconds","mb_per_s",
//   "extras":[path...],"pruned"}
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "tandem/agent/stage_source.hpp"
#include "tandem/agent/step.hpp"
#include "tandem/manifest.hpp"

namespace tandem::agent {

// Live counters of the running stage, read by GET /v1/stage/progress while apply runs.
struct StageProgress {
  std::atomic<std::uint64_t> total_bytes{0};
  std::atomic<std::uint64_t> done_bytes{0};
  std::atomic<std::uint64_t> files_total{0};
  std::atomic<std::uint64_t> files_done{0};
  std::atomic<bool> running{false};
  nlohmann::json to_json() const;
};

// Frees the backups of stage op `op_id` (stage-backups/<op_id> under `state_dir`): its files are
// kept for good. Evidence: {"files", "freed_bytes"} (bytes that nothing else held).
Result<json> release_stage_backups(const std::string& state_dir, const std::string& op_id);

class StageStep : public Step {
 public:
  // `source` may be null (restore, the dead-man): then only undo works.
  StageStep(Stage config, std::vector<StagedPath> paths, std::string cache_file, std::shared_ptr<StageSource> source,
            std::shared_ptr<StageProgress> progress)
      : cfg_(std::move(config)),
        paths_(std::move(paths)),
        cache_file_(std::move(cache_file)),
        source_(std::move(source)),
        progress_(std::move(progress)) {}
  std::string name() const override { return "stage"; }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  Result<json> compare(const StepContext& ctx, bool make_backups) const;
  Stage cfg_;
  std::vector<StagedPath> paths_;
  std::string cache_file_;
  std::shared_ptr<StageSource> source_;
  std::shared_ptr<StageProgress> progress_;
};

}  // namespace tandem::agent
