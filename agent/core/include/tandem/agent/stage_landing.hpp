// Landing one staged file: never an in-place edit. Bytes go to a partial file beside the target,
// chunk by chunk; a small sidecar records the length after each chunk (both fdatasynced every
// 256 MiB), so a cut transfer (killed agent, controller or link) resumes from the last recorded
// chunk, its prefix re-read into the running SHA-256 rather than fetched again. The whole file's SHA-256 must
// equal the source's before it is renamed into place; otherwise the partial is removed and the
// target is left as it was. One SHA-256 pass per byte: hashing is the CPU's largest cost here.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "tandem/agent/error.hpp"
#include "tandem/agent/fs.hpp"
#include "tandem/agent/stage_source.hpp"

namespace tandem::agent {

// Beside `target` (a real or host path): ".NAME.tandem-partial" and its sidecar
// ".NAME.tandem-partial.json" ({"sha256","size","chunk","length"}: the source file it is a copy of,
// and how many bytes of it are on disk).
std::string partial_path(const std::string& target);
std::string sidecar_path(const std::string& target);
// Is this file name one of the above (or a restore's temp file)? Hashing and extras skip them.
bool is_stage_temp_name(const std::string& name);

// Bytes per second shared by every file of one stage (stage.rate_limit); unlimited when 0.
class RateLimiter {
 public:
  explicit RateLimiter(std::uint64_t bytes_per_s) : rate_(bytes_per_s) {}
  void take(std::uint64_t n);  // sleeps until `n` more bytes fit the rate

 private:
  std::uint64_t rate_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::uint64_t taken_ = 0;
};

struct LandOptions {
  std::uint64_t chunk = 8ull << 20;
  FileOwner owner;  // what the landed file gets (mode from the source, owner of what it replaces)
  RateLimiter* limiter = nullptr;
  std::function<void(std::uint64_t bytes)> on_bytes;  // fetched or re-verified bytes; thread-safe
};

struct LandResult {
  std::uint64_t fetched = 0;  // bytes that crossed the network this time
  std::uint64_t resumed = 0;  // bytes of an earlier partial that were re-verified and kept
};

// `real_target` is resolved (NodeRoot) by the caller, and so are the partial and sidecar beside it.
Result<LandResult> land_file(StageSource& src, const SourceFile& f, const std::string& real_target,
                             const LandOptions& o);

// Removes a partial and its sidecar if present (a source that changed, a full disk).
void remove_partial(const std::string& real_target);

}  // namespace tandem::agent
