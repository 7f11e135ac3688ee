// Step "stop": run the manifest-declared stop commands (only those: argv, absolute argv[0], no
// shell, timeout kills the process group), then wait for the serving port to go dark and report
// GPU memory in use. Stopping the old lane is undone by the rollback lane, not here.
//
// Evidence: {"commands":[{"argv","exit_code","signal","timed_out","duration_ms","output_tail","ok"}],
//   "port":{"port","dark","method","waited_ms","listeners"},
//   "gpu":{"tool":"nvidia-smi"|null,"memory_used_mib":[...],"note"}}
#pragma once
#include <vector>

#include "tandem/agent/step.hpp"
#include "tandem/manifest.hpp"

namespace tandem::agent {

// GPU memory in use per GPU via nvidia-smi, or a note saying why not.
json gpu_memory_evidence();

class StopStep : public Step {
 public:
  StopStep(std::vector<Command> commands, int port, Duration port_dark_timeout)
      : commands_(std::move(commands)), port_(port), timeout_(port_dark_timeout) {}
  std::string name() const override { return "stop"; }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  std::vector<Command> commands_;
  int port_;
  Duration timeout_;
};

}  // namespace tandem::agent
