#include "deadman_summary.hpp"

#include <ctime>
#include <type_traits>

namespace tandem::ctl {
namespace {

using nlohmann::json;

template <class T>
T field(const json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->get<bool>() : fallback;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->get<std::string>() : fallback;
  } else {
    return it->is_number_integer() ? it->get<T>() : fallback;
  }
}

std::string command_text(const json& argv) {
  if (!argv.is_array()) return "?";
  std::string s;
  for (const auto& a : argv) {
    if (!a.is_string()) continue;
    if (!s.empty()) s += ' ';
    s += a.get<std::string>();
  }
  return s.empty() ? "?" : s;
}

std::string outcome_text(const json& o) {
  const std::string error = field(o, "error", std::string{});
  if (!error.empty()) return "could not run: " + error;
  if (field(o, "timed_out", false)) return "TIMED OUT";
  const long long code = field(o, "exit_code", -1LL);
  if (code == 0) return "ok";
  const std::string status = field(o, "status", std::string{});
  return "FAILED (" + (status.empty() ? "exit code " + std::to_string(code) : status) + ")";
}

}  // namespace

std::string utc_timestamp(long long unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  if (unix_ms <= 0 || ::gmtime_r(&t, &tm) == nullptr) return "an unknown time";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string deadman_summary(const json& d) {
  if (!d.is_object()) return "";
  if (!field(d, "fired", false)) {
    if (field(d, "armed", false)) return "; dead-man armed, " + std::to_string(field(d, "seconds_left", 0LL)) + " s left";
    return "; dead-man not armed";
  }
  const std::string by = field(d, "fired_by", std::string{});
  std::string s = "; dead-man FIRED at " + utc_timestamp(field(d, "fired_at_ms", 0LL)) + (by.empty() ? "" : " by " + by);
  const auto outcomes = d.find("outcomes");
  std::size_t ok = 0, n = 0;
  std::string lines;
  if (outcomes != d.end() && outcomes->is_array()) {
    for (const auto& o : *outcomes) {
      const auto argv = o.find("argv");  // find, not value(): a non-object entry must not throw
      const std::string result = outcome_text(o);
      ok += result == "ok";
      ++n;
      lines += "\n    restored: " + command_text(argv != o.end() ? *argv : json()) + ": " + result;
    }
  }
  s += ", " + std::to_string(ok) + "/" + std::to_string(n) + " rollback commands ok";
  if (!field(d, "fire_complete", false)) s += " (the fire did not finish: run `tandemctl rollback`)";
  return s + lines;
}

}  // namespace tandem::ctl
