// Step "sha": SHA-256 of the engine binary, pinned configs, model and drafter dirs, checked
// against the manifest's pins. The controller compares the digests across ranks ("copy whole
// files and compare SHA-256"). Changes nothing on the node; apply is journaled for its evidence.
//
// Evidence: {"files":{path:sha256},"trees":{dir:{rel:sha256}},"total_bytes","bytes_read",
//   "cache":{"hits","misses"},"pins":[{"path","expected","actual","ok"}],"mismatches"}
#pragma once
#include <string>
#include <vector>

#include "tandem/agent/hash_tree.hpp"
#include "tandem/agent/step.hpp"
#include "tandem/manifest.hpp"

namespace tandem::agent {

class ShaStep : public Step {
 public:
  ShaStep(std::vector<std::string> targets, std::vector<PinnedFile> pins, std::string cache_file)
      : targets_(std::move(targets)), pins_(std::move(pins)), cache_file_(std::move(cache_file)) {}
  static std::vector<std::string> engine_targets(const Engine& e);  // binary, pins, model, drafter

  std::string name() const override { return "sha"; }
  void set_progress(ProgressFn fn) { progress_ = std::move(fn); }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  Result<json> hash_and_compare(const NodeRoot& root) const;
  std::vector<std::string> targets_;
  std::vector<PinnedFile> pins_;
  std::string cache_file_;
  ProgressFn progress_;
};

}  // namespace tandem::agent
