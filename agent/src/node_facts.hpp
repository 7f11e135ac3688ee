// What /v1/health reports about the node: memory, disk, GPUs, listening ports.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::agentd {

// `root` is the node root (sandboxes read their own /proc copies); dirs are real paths.
nlohmann::json node_facts(const std::string& root, const std::string& state_dir, const std::string& cache_dir_host);

}  // namespace tandem::agentd
