// What /proc says about a process. Used to prove a pid still names the process we started (pids
// are reused; the start time in /proc/<pid>/stat is not) before signalling it.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::supervise {

struct ProcStat {
  pid_t pid = 0;
  char state = '?';  // R, S, D, Z, T, ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  std::uint64_t start_ticks = 0;  // field 22: clock ticks after boot
};

std::optional<ProcStat> read_proc_stat(pid_t pid);

// Running (not a zombie) and started at `start_ticks`: still the process we recorded.
bool same_process_alive(pid_t pid, std::uint64_t start_ticks);

// Running members of a process group (zombies excluded: they hold no resources and only their
// parent can remove them).
std::vector<pid_t> live_group_members(pid_t pgid);

// /proc/sys/kernel/random/boot_id: start times and monotonic deadlines only mean anything within one boot.
std::string boot_id();

}  // namespace tandem::supervise
