// Step "shm": remove stale torch/psm/nccl shared-memory files directly in /dev/shm.
// Only regular files are removed. A symlink whose name matches is SKIPPED (reported, neither the
// link nor its target touched); directories are skipped too: never recurse, never follow.
// Removed files cannot be brought back; undo says so.
//
// Evidence (apply): {"dir","removed":[{"name","bytes"}],"count","bytes_freed","skipped":[{"name","why"}]}
#pragma once
#include <string>
#include <vector>

#include "tandem/agent/step.hpp"

namespace tandem::agent {

class ShmStep : public Step {
 public:
  explicit ShmStep(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {}
  std::string name() const override { return "shm"; }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  Result<json> scan(const NodeRoot& root) const;
  std::vector<std::string> patterns_;
};

}  // namespace tandem::agent
