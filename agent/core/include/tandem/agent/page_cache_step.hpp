// Step "page_cache": sync, drop the page cache, and require MemAvailable >= the manifest minimum
// (the seed's "confirm ~115 GiB available"). A kernel that refuses the drop (containers: EACCES,
// EPERM, EROFS) is reported in the evidence and the MemAvailable check still runs.
//
// Evidence: {"sync":true,"drop":{"requested","done","path","refused_by_kernel","reason"},
//   "mem_available_bytes","mem_available","min_required_bytes","min_required","ok"}
#pragma once
#include <cstdint>
#include <optional>

#include "tandem/agent/step.hpp"

namespace tandem::agent {

// "98.2 GiB", "115 GiB": one decimal, dropped when whole.
std::string gib_text(std::uint64_t bytes);
// MemAvailable in bytes from /proc/meminfo text.
Result<std::uint64_t> parse_mem_available(const std::string& meminfo, const std::string& path_for_errors);

class PageCacheStep : public Step {
 public:
  PageCacheStep(bool drop, std::optional<std::uint64_t> min_available) : drop_(drop), min_(min_available) {}
  std::string name() const override { return "page_cache"; }
  Result<json> check(const StepContext& ctx) override;
  Result<json> plan(const StepContext& ctx) override;
  Result<json> apply(const StepContext& ctx, const json& intent) override;
  Result<json> verify(const StepContext& ctx, const json& intent, const json& applied) override;
  Result<json> undo(const StepContext& ctx, const json& intent) override;

 private:
  Result<json> memory(const NodeRoot& root, json ev) const;
  bool drop_;
  std::optional<std::uint64_t> min_;
};

}  // namespace tandem::agent
