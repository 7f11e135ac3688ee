#include "tandem/supervise/proc_stat.hpp"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tandem::supervise {

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // comm (field 2) is in parentheses and may itself contain spaces or ')': split at the last ')'.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  ProcStat s;
  s.pid = pid;
  long long ppid = 0, pgrp = 0, session = 0;
  rest >> s.state >> ppid >> pgrp >> session;
  std::string skip;
  for (int field = 7; field < 22 && rest; ++field) rest >> skip;  // tty_nr .. itrealvalue
  rest >> s.start_ticks;
  if (!rest) return std::nullopt;
  s.ppid = static_cast<pid_t>(ppid);
  s.pgrp = static_cast<pid_t>(pgrp);
  s.session = static_cast<pid_t>(session);
  return s;
}

bool same_process_alive(pid_t pid, std::uint64_t start_ticks) {
  if (pid <= 0) return false;
  auto s = read_proc_stat(pid);
  return s && s->state != 'Z' && s->state != 'X' && s->start_ticks == start_ticks;
}

std::vector<pid_t> live_group_members(pid_t pgid) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long v = std::strtol(e->d_name, &end, 10);
    if (v <= 0 || *end != '\0') continue;
    auto s = read_proc_stat(static_cast<pid_t>(v));
    if (s && s->pgrp == pgid && s->state != 'Z' && s->state != 'X') out.push_back(s->pid);
  }
  ::closedir(d);
  return out;
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace tandem::supervise
