// Where tandem-serve's start-up time goes. The loader marks each phase as it ends (weights loaded,
// drafter loaded, ranks met, KV pool sized, graphs captured, ready); /health reports them so a
// bind report can show an operator whether a slow cold start was the weights, the pool or the
// graphs. A phase that does not apply to this run (no drafter; graphs on the CPU) is listed as
// "n/a" with the reason, so the report never leaves the reader guessing whether it was measured.
#pragma once
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::engine::serve {

class StartupPhases {
 public:
  StartupPhases();  // the clock starts now (before anything is loaded)

  // The phase that ran since the previous mark ended now.
  void mark(const std::string& phase, const std::string& detail = {});
  // A phase this run does not have (status "n/a") or defers (status "deferred"), with why.
  void note(const std::string& phase, const std::string& status, const std::string& detail);

  // {"started_at_ms", "total_ms" (to the last mark), "phases": [{"phase", "status", "at_ms",
  // "ms", "detail"}]}; at_ms is unix milliseconds, ms the phase's own duration. Thread safe.
  nlohmann::json to_json() const;

 private:
  struct Phase {
    std::string name, status, detail;
    long long at_ms = 0, ms = 0;
  };
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_;
  long long started_at_ms_ = 0;
  std::vector<Phase> phases_;
};

}  // namespace tandem::engine::serve
