#include "startup_phases.hpp"

namespace tandem::engine::serve {

namespace {
long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

StartupPhases::StartupPhases() : start_(std::chrono::steady_clock::now()), last_(start_), started_at_ms_(unix_ms()) {}

void StartupPhases::mark(const std::string& phase, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(mu_);
  Phase p{phase, "done", detail, unix_ms(), std::chrono::duration_cast<std::chrono::milliseconds>(now - last_).count()};
  last_ = now;
  phases_.push_back(std::move(p));
}

void StartupPhases::note(const std::string& phase, const std::string& status, const std::string& detail) {
  std::lock_guard lk(mu_);
  phases_.push_back(Phase{phase, status, detail, 0, 0});
}

nlohmann::json StartupPhases::to_json() const {
  std::lock_guard lk(mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : phases_) {
    nlohmann::json j{{"phase", p.name}, {"status", p.status}};
    if (p.status == "done") {
      j["at_ms"] = p.at_ms;
      j["ms"] = p.ms;
    }
    if (!p.detail.empty()) j["detail"] = p.detail;
    list.push_back(std::move(j));
  }
  return {{"started_at_ms", started_at_ms_},
          {"total_ms", std::chrono::duration_cast<std::chrono::milliseconds>(last_ - start_).count()},
          {"phases", list}};
}

}  // namespace tandem::engine::serve
