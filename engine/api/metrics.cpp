#include "metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace tandem::engine::api {

void Metrics::declare(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard lock(mu_);
  if (families_.count(name)) return;
  families_[name] = Family{type, help, {}, {}, {}};
  order_.push_back(name);
}

void Metrics::declare_histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  if (!std::is_sorted(bounds.begin(), bounds.end()) || std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end())
    throw std::logic_error("histogram '" + name + "': bucket bounds must be strictly ascending");
  std::lock_guard lock(mu_);
  if (families_.count(name)) return;
  families_[name] = Family{"histogram", help, {}, std::move(bounds), {}};
  order_.push_back(name);
}

Metrics::Family& Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("metric '" + name + "' was not declared");
  return it->second;
}

std::string Metrics::label_text(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"";
    for (char c : v) {  // escape as the exposition format requires
      if (c == '\\' || c == '"') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += "\"";
  }
  return out + "}";
}

std::string Metrics::number(double value) {
  // Integers as such; anything else in the shortest form that reads back to the same double,
  // so a growing seconds counter keeps its resolution (a rate() over a minute stays exact).
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  } else {
    const auto r = std::to_chars(buf, buf + sizeof buf - 1, value);
    *r.ptr = '\0';
  }
  return buf;
}

std::string Metrics::bound_text(double bound) {
  // Whole bounds as "1.0", as Python's client (so vLLM) writes them: a panel that selects
  // le="1.0" finds ours too.
  if (bound == std::floor(bound) && std::fabs(bound) < 1e15) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", bound);
    return buf;
  }
  return number(bound);
}

void Metrics::add(const std::string& name, double delta, const Labels& labels) {
  std::lock_guard lock(mu_);
  family(name).series[label_text(labels)] += delta;
}

void Metrics::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mu_);
  family(name).series[label_text(labels)] = value;
}

double Metrics::get(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(label_text(labels));
  return s == it->second.series.end() ? 0 : s->second;
}

Metrics::HistogramSeries& Metrics::histogram(Family& f, const Labels& labels) {
  if (f.type != "histogram") throw std::logic_error("observe/touch on a " + f.type);
  auto& h = f.histograms[labels];
  if (h.counts.empty()) h.counts.assign(f.bounds.size() + 1, 0);
  return h;
}

void Metrics::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = family(name);
  HistogramSeries& h = histogram(f, labels);
  // le is inclusive: a value equal to a bound falls in that bound's bucket.
  const auto at = std::lower_bound(f.bounds.begin(), f.bounds.end(), value) - f.bounds.begin();
  ++h.counts[static_cast<std::size_t>(at)];
  h.sum += value;
}

void Metrics::touch(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  histogram(family(name), labels);
}

void Metrics::render_histogram(const std::string& name, const Family& f, std::string& out) {
  for (const auto& [labels, h] : f.histograms) {
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < h.counts.size(); ++b) {
      cumulative += h.counts[b];
      Labels with_le = labels;
      with_le["le"] = b < f.bounds.size() ? bound_text(f.bounds[b]) : "+Inf";
      out += name + "_bucket" + label_text(with_le) + " " + std::to_string(cumulative) + "\n";
    }
    const std::string l = label_text(labels);
    out += name + "_sum" + l + " " + number(h.sum) + "\n";
    out += name + "_count" + l + " " + std::to_string(cumulative) + "\n";
  }
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + f.type + "\n";
    if (f.type == "histogram") {
      render_histogram(name, f, out);
      continue;
    }
    if (f.series.empty()) out += name + " 0\n";
    for (const auto& [labels, value] : f.series) out += name + labels + " " + number(value) + "\n";
  }
  return out;
}

}  // namespace tandem::engine::api
