// Prometheus text exposition (version 0.0.4) for /metrics: counters and gauges with labels,
// thread-safe, rendered in registration order. Scrapers and `tandemctl bench` read it.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::engine::api {

class Metrics {
 public:
  // Declare a family once; `type` is "counter" or "gauge".
  void declare(const std::string& name, const std::string& type, const std::string& help);
  // labels like {{"status","ok"}}; a missing series starts at 0.
  void add(const std::string& name, double delta, const std::map<std::string, std::string>& labels = {});
  void set(const std::string& name, double value, const std::map<std::string, std::string>& labels = {});
  double get(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;

  std::string render() const;

 private:
  struct Family {
    std::string type, help;
    std::map<std::string, double> series;  // rendered label set -> value
  };
  static std::string label_text(const std::map<std::string, std::string>& labels);
  Family& family(const std::string& name);

  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

}  // namespace tandem::engine::api
