// What `--version` says in all three programs: version, the commit it was configured from, the
// build type and, for tandem-serve, the CUDA architectures its device code was built for.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem {

struct BuildInfo {
  std::string version;
  std::string commit;       // short hash at configure time; "unknown" outside git
  std::string build_type;   // CMAKE_BUILD_TYPE
  std::vector<std::string> cuda_archs;  // empty: no CUDA back end in this build
};

const BuildInfo& build_info();
// The project version alone (what the agent API and logs quote).
const std::string& version();

// "tandemctl 0.1.0 (commit 1a2b3c4d5e6f, RelWithDebInfo)"; with `cuda`, ", CUDA sm_90 sm_121"
// or ", CPU only" is added (tandem-serve: the one program with device code).
std::string version_text(std::string_view program, bool cuda = false);
// {"program", "version", "commit", "build_type"} and, with `cuda`, "cuda_archs": [...].
nlohmann::ordered_json version_json(std::string_view program, bool cuda = false);

}  // namespace tandem
