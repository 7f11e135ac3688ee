// The running rank as recorded on disk (<state dir>/rank.json), so an agent that crashed and came
// back can find the rank it left behind and stop it -- an orphaned rank hangs the other side's
// rendezvous (Gloo) for ~30 minutes.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::supervise {

struct RankRecord {
  pid_t pid = -1;
  pid_t pgid = -1;
  std::uint64_t start_ticks = 0;   // /proc/<pid>/stat starttime: proves the pid was not reused
  std::string boot_id;             // start_ticks only mean anything within this boot
  std::int64_t started_at_ms = 0;  // wall clock, for people
  std::string log_path;
  std::string ready_host;
  int ready_port = 0;
  std::vector<std::string> argv;
};

std::string rank_record_path(const std::string& state_dir);
Status save_rank_record(const std::string& state_dir, const RankRecord& r);
Result<std::optional<RankRecord>> load_rank_record(const std::string& state_dir);
Status clear_rank_record(const std::string& state_dir);

}  // namespace tandem::supervise
