#include "metrics.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace tandem::engine::api {

void Metrics::declare(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard lock(mu_);
  if (families_.count(name)) return;
  families_[name] = Family{type, help, {}};
  order_.push_back(name);
}

Metrics::Family& Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("metric '" + name + "' was not declared");
  return it->second;
}

std::string Metrics::label_text(const std::map<std::string, std::string>& labels) {
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

void Metrics::add(const std::string& name, double delta, const std::map<std::string, std::string>& labels) {
  std::lock_guard lock(mu_);
  family(name).series[label_text(labels)] += delta;
}

void Metrics::set(const std::string& name, double value, const std::map<std::string, std::string>& labels) {
  std::lock_guard lock(mu_);
  family(name).series[label_text(labels)] = value;
}

double Metrics::get(const std::string& name, const std::map<std::string, std::string>& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(label_text(labels));
  return s == it->second.series.end() ? 0 : s->second;
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + f.type + "\n";
    if (f.series.empty()) out += name + " 0\n";
    for (const auto& [labels, value] : f.series) {
      // Integers as such; anything else in the shortest form that reads back to the same double,
      // so a growing seconds counter keeps its resolution (a rate() over a minute stays exact).
      char buf[64];
      if (value == std::floor(value) && std::fabs(value) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.0f", value);
      } else {
        const auto r = std::to_chars(buf, buf + sizeof buf - 1, value);
        *r.ptr = '\0';
      }
      out += name + labels + " " + buf + "\n";
    }
  }
  return out;
}

}  // namespace tandem::engine::api
