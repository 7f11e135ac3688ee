// The dead-man part of `tandemctl status`: one line from an agent's /v1/health "deadman" object,
// plus one line per rollback command when it fired (what the fire put back, and how it went).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tandem::ctl {

// `deadman` is the agent's JSON (armed, seconds_left, fired, fired_by, fired_at_ms, fire_complete,
// outcomes[]); anything missing or of the wrong type reads as absent, never throws.
// Returns "; dead-man ..." (no newline) and, when it fired, "\n    restored: ..." lines.
std::string deadman_summary(const nlohmann::json& deadman);

// "2026-12-04T14:02:11Z" for unix milliseconds (UTC, second precision).
std::string utc_timestamp(long long unix_ms);

}  // namespace tandem::ctl
