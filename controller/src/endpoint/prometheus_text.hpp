// Reading an engine's /metrics (Prometheus text format): the speculative-decoding counters of
// tandem-serve and of vLLM, so gates and bench can show acceptance for either kind of lane.
#pragma once
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tandem::prom {

// Sample name -> value, summed over label sets ("vllm:x_total{engine="0"} 3" and "{engine="1"} 4"
// give x_total = 7). Comments and malformed lines are skipped.
std::map<std::string, double> sum_by_name(const std::string& text);

struct SpecCounters {
  bool present = false;         // both the drafted and the accepted counter were found
  std::string source;           // which names were found: "tandem" or "vllm"
  double drafted = 0;           // draft tokens proposed
  double accepted = 0;          // draft tokens the target accepted
  std::optional<double> drafts; // verify steps, when the engine counts them

  // accepted / drafted; nullopt before anything was drafted.
  std::optional<double> acceptance() const;
  // Tokens committed per verify step (accepted + the target's bonus token), when drafts are counted.
  std::optional<double> mean_acceptance_length() const;
  SpecCounters minus(const SpecCounters& before) const;  // the traffic between two scrapes
  nlohmann::json to_json() const;
};

SpecCounters spec_counters(const std::string& metrics_text);

}  // namespace tandem::prom
