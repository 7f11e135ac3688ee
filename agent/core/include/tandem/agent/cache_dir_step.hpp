// Step "cache_dir": the engine's cache dir exists, is owned by the run user and writable by it
// (the seed's launch aborted on a root-owned /var/cache/...). Missing directories are created
// with their missing parents, owned by the run user; undo removes only those it created (and only
// while empty). An existing directory owned by someone else is refused, never chowned.
//
// Evidence: {"path","run_user","run_uid","exists","owner_uid","mode","writable","created":[path...],"ok"}
#pragma once
#include <string>

#include "tandem/agent/step.hpp"

namespace tandem::agent {

class CacheDirStep : public Step {
 public:
  // run_user empty: the agent's own user. require_owned false: only existence is required.
  CacheDirStep(std::string path, std::string run_user, bool require_owned)
      : path_(std::move(path)), user_(std::move(run_user)), require_owned_(require_owned) {}
  std::string name() const override { return "cache_dir"; }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  Result<json> inspect(const NodeRoot& root) const;
  std::string path_;
  std::string user_;
  bool require_owned_;
};

}  // namespace tandem::agent
