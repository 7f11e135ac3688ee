// Systemd timers that could resurrect an old serving stack: found by name or content (the timer
// unit or the service it triggers), stopped only on a real host where systemd is PID 1.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/agent/node_root.hpp"

namespace tandem::agent {

struct TimerMatch {
  std::string unit;        // e.g. "watchdog.timer"
  std::string host_path;   // where the unit file is
  std::string matched_in;  // "name", "timer", or the service unit's host path
  std::string pattern;
  nlohmann::json to_json() const;
};

std::vector<TimerMatch> find_matching_timers(const NodeRoot& root, const std::vector<std::string>& patterns);

// Why timers cannot be stopped here, or empty when they can (root is "/" and PID 1 is systemd).
std::string why_timers_cannot_be_stopped(const NodeRoot& root);

}  // namespace tandem::agent
