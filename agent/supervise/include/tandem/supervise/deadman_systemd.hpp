// The systemd side of the dead-man: a transient timer that runs `tandemd deadman-fire` from PID 1,
// so the rollback happens even when both controller and agent are dead. Driven through
// systemd-run/systemctl (argv, no shell): no libsystemd dependency.
#pragma once
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::supervise {

struct SystemdTools {
  std::string systemd_run = "/usr/bin/systemd-run";
  std::string systemctl = "/usr/bin/systemctl";
};

// Ok when systemd is PID 1 (/run/systemd/system exists, as sd_booted() checks); otherwise an
// error telling the operator to use `deadman.backend: agent`.
Status check_systemd_is_pid1();

// "tandem-deadman-<bind>". Bind names are limited to [A-Za-z0-9_.-] so the unit name needs no
// escaping and can never address another unit.
Result<std::string> deadman_unit(const std::string& bind);

std::vector<std::string> systemd_run_argv(const SystemdTools& t, const std::string& unit, long long seconds,
                                          const std::string& tandemd, const std::string& state_dir);
std::vector<std::string> timer_stop_argv(const SystemdTools& t, const std::string& unit);
// A failed earlier run of the same unit would make systemd-run refuse the name.
std::vector<std::string> reset_failed_argv(const SystemdTools& t, const std::string& unit);
// `systemctl show <unit>.timer -p ActiveState --value`: "active" while the timer is pending.
std::vector<std::string> timer_state_argv(const SystemdTools& t, const std::string& unit);

}  // namespace tandem::supervise
