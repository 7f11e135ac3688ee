#include "tandem/supervise/deadman_systemd.hpp"

#include <fstream>
#include <sys/stat.h>

namespace tandem::supervise {

Status check_systemd_is_pid1() {
  struct stat st {};
  if (::stat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode)) return Ok{};
  std::string comm;
  std::ifstream("/proc/1/comm") >> comm;
  return Error{"dead-man backend systemd needs systemd as PID 1, but PID 1 is '" + comm +
               "' (no /run/systemd/system); set `deadman: {backend: agent}` in the manifest so the agent keeps the "
               "deadline itself"};
}

Result<std::string> deadman_unit(const std::string& bind) {
  if (bind.empty()) return Error{"dead-man unit: empty bind name"};
  for (char c : bind) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-';
    if (!ok)
      return Error{"dead-man unit: bind name '" + bind + "' has '" + std::string(1, c) +
                   "'; only letters, digits, '_', '.' and '-' can name a systemd unit unescaped"};
  }
  return "tandem-deadman-" + bind;
}

std::vector<std::string> systemd_run_argv(const SystemdTools& t, const std::string& unit, long long seconds,
                                          const std::string& tandemd, const std::string& state_dir) {
  return {t.systemd_run,
          "--unit=" + unit,
          "--description=tandem dead-man: roll back unless the bind is proven",
          "--on-active=" + std::to_string(seconds) + "s",
          // Default timer accuracy is a minute; a dead-man should fire when it says.
          "--timer-property=AccuracySec=1s",
          tandemd,
          "deadman-fire",
          "--state-dir",
          state_dir};
}

std::vector<std::string> timer_stop_argv(const SystemdTools& t, const std::string& unit) {
  return {t.systemctl, "stop", unit + ".timer"};
}

std::vector<std::string> reset_failed_argv(const SystemdTools& t, const std::string& unit) {
  return {t.systemctl, "reset-failed", unit + ".service", unit + ".timer"};
}

std::vector<std::string> timer_state_argv(const SystemdTools& t, const std::string& unit) {
  return {t.systemctl, "show", unit + ".timer", "-p", "ActiveState", "--value"};
}

}  // namespace tandem::supervise
