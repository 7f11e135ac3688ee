#include "tandem/build_info.hpp"

#include <sstream>

#include "tandem/version.hpp"

namespace tandem {

const BuildInfo& build_info() {
  static const BuildInfo info = [] {
    BuildInfo b{generated::kVersion, generated::kCommit, generated::kBuildType, {}};
    std::istringstream archs(generated::kCudaArchs);  // CMake's list, written space-separated
    for (std::string a; archs >> a;) b.cuda_archs.push_back(a);
    if (b.build_type.empty()) b.build_type = "unspecified";
    return b;
  }();
  return info;
}

const std::string& version() { return build_info().version; }

std::string version_text(std::string_view program, bool cuda) {
  const BuildInfo& b = build_info();
  std::string out = std::string(program) + " " + b.version + " (commit " + b.commit + ", " + b.build_type;
  if (cuda) {
    if (b.cuda_archs.empty()) {
      out += ", CPU only";
    } else {
      out += ", CUDA";
      for (const auto& a : b.cuda_archs) out += " sm_" + a;
    }
  }
  return out + ")";
}

nlohmann::ordered_json version_json(std::string_view program, bool cuda) {
  const BuildInfo& b = build_info();
  nlohmann::ordered_json j{{"program", program}, {"version", b.version}, {"commit", b.commit}, {"build_type", b.build_type}};
  if (cuda) j["cuda_archs"] = b.cuda_archs;
  return j;
}

}  // namespace tandem
