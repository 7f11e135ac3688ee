// Step "cron": comment out cron lines (and find systemd timers) that could relaunch the old stack
// while the port is dark. Undo restores every edited crontab byte for byte from journaled backups.
//
// Evidence (apply): {"files":[{"path","lines":[{"line","text","pattern"}],"sha256_before","sha256_after",
//   "mode"}], "files_changed", "lines_disabled", "refused":[error...],
//   "timers":{"found":[{"unit","path","matched_in","pattern"}],"stopped":[unit...],"not_stopped_reason"}}
#pragma once
#include <string>
#include <vector>

#include "tandem/agent/step.hpp"

namespace tandem::agent {

class CronStep : public Step {
 public:
  CronStep(std::vector<std::string> patterns, bool include_timers)
      : patterns_(std::move(patterns)), include_timers_(include_timers) {}
  std::string name() const override { return "cron"; }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  json scan_timers(const NodeRoot& root) const;
  std::vector<std::string> patterns_;
  bool include_timers_;
};

}  // namespace tandem::agent
