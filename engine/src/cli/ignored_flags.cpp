#include "cli/ignored_flags.hpp"

namespace tandem::engine {

std::vector<std::string> ignored_flag_notes(const CLI::App& app, const ServeConfig& cfg) {
  std::vector<std::string> notes;
  const auto given = [&](const char* flag) { return app.count(flag) > 0; };
  if (given("--moe-backend"))
    notes.push_back("--moe-backend " + cfg.moe_backend +
                    " is accepted for vLLM compatibility and ignored: each device has one MoE expert kernel");
  if (given("--trust-remote-code"))
    notes.push_back("--trust-remote-code is accepted for vLLM compatibility and ignored: no model code is ever run, "
                    "only its config and safetensors are read");
  if (given("--distributed-executor-backend"))
    notes.push_back("--distributed-executor-backend " + cfg.distributed_executor_backend +
                    " is accepted for vLLM compatibility and ignored: ranks are always one process per node over TCP "
                    "(--nnodes, --node-rank)");
  if (given("--load-format") && cfg.load_format == "auto")
    notes.push_back("--load-format auto is accepted and means safetensors, the one format read");
  if (given("--enforce-eager") && cfg.device == "cpu")
    notes.push_back("--enforce-eager is ignored with --device cpu: only the CUDA path captures graphs");
  if (given("--batch-invariant-tokens") && cfg.device == "cpu")
    notes.push_back("--batch-invariant-tokens is ignored with --device cpu: it chooses between CUDA kernels");
  return notes;
}

}  // namespace tandem::engine
