// Prometheus text exposition (version 0.0.4) for /metrics: counters, gauges and histograms with
// labels, thread-safe, rendered in registration order. Scrapers and `tandemctl bench` read it;
// tests/api runs the output through `promtool check metrics`.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::engine::api {

class Metrics {
 public:
  using Labels = std::map<std::string, std::string>;

  // Misuse (an undeclared name, observe on a gauge, unsorted bounds) throws nothing: the update is
  // dropped, problems() reports it and render() shows it as a comment line.
  // Declare a family once; `type` is "counter" or "gauge".
  void declare(const std::string& name, const std::string& type, const std::string& help);
  // A histogram family with these upper bounds (ascending; +Inf is implied).
  void declare_histogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  // labels like {{"status","ok"}}; a missing series starts at 0.
  void add(const std::string& name, double delta, const Labels& labels = {});
  void set(const std::string& name, double value, const Labels& labels = {});
  double get(const std::string& name, const Labels& labels = {}) const;
  // One observation into a histogram (its bucket, _sum and _count).
  void observe(const std::string& name, double value, const Labels& labels = {});
  // Makes a histogram's series exist with zero counts, so a scrape before the first request
  // already shows it (dashboards then read 0, not "no data").
  void touch(const std::string& name, const Labels& labels = {});

  std::string render() const;
  // Every misuse so far, as one Error; Ok when none.
  Status problems() const;

 private:
  struct HistogramSeries {
    std::vector<std::uint64_t> counts;  // per bucket, not cumulative; the last one is +Inf
    double sum = 0;
  };
  struct Family {
    std::string type, help;
    std::map<std::string, double> series;  // rendered label set -> value (counter, gauge)
    std::vector<double> bounds;            // histogram only
    std::map<Labels, HistogramSeries> histograms;
  };
  static std::string label_text(const Labels& labels);
  static std::string number(double value);
  static std::string bound_text(double bound);
  static void render_histogram(const std::string& name, const Family& f, std::string& out);
  // Both with mu_ held; null (and the misuse recorded) when the name does not fit.
  Family* family(const std::string& name);
  HistogramSeries* histogram(const std::string& name, const Labels& labels);
  void misuse(std::string what);

  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
  std::vector<std::string> misuse_;
};

}  // namespace tandem::engine::api
