#include "metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace tandem::engine::api {

void Metrics::declare(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard lock(mu_);
  if (families_.count(name)) return;
  families_[name] = Family{type, help, {}, {}, {}};
  order_.push_back(name);
}

void Metrics::declare_histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  if (!std::is_sorted(bounds.begin(), bounds.end()) || std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end())
    return misuse("histogram '" + name + "': bucket bounds must be strictly ascending; not declared");
  if (families_.count(name)) return;
  families_[name] = Family{"histogram", help, {}, std::move(bounds), {}};
  order_.push_back(name);
}

Metrics::Family* Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    misuse("metric '" + name + "' was not declared; its updates are dropped");
    return nullptr;
  }
  return &it->second;
}

void Metrics::misuse(std::string what) {
  if (std::find(misuse_.begin(), misuse_.end(), what) == misuse_.end()) misuse_.push_back(std::move(what));
}

Status Metrics::problems() const {
  std::lock_guard lock(mu_);
  if (misuse_.empty()) return Ok{};
  std::string all;
  for (const auto& m : misuse_) all += (all.empty() ? "" : "; ") + m;
  return Error{all, "metrics"};
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
  if (Family* f = family(name)) f->series[label_text(labels)] += delta;
}

void Metrics::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mu_);
  if (Family* f = family(name)) f->series[label_text(labels)] = value;
}

double Metrics::get(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(label_text(labels));
  return s == it->second.series.end() ? 0 : s->second;
}

Metrics::HistogramSeries* Metrics::histogram(const std::string& name, const Labels& labels) {
  Family* f = family(name);
  if (!f) return nullptr;
  if (f->type != "histogram") {
    misuse("observe/touch on '" + name + "', a " + f->type + "; dropped");
    return nullptr;
  }
  auto& h = f->histograms[labels];
  if (h.counts.empty()) h.counts.assign(f->bounds.size() + 1, 0);
  return &h;
}

void Metrics::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mu_);
  HistogramSeries* h = histogram(name, labels);
  if (!h) return;
  const auto& bounds = families_.at(name).bounds;
  // le is inclusive: a value equal to a bound falls in that bound's bucket.
  const auto at = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++h->counts[static_cast<std::size_t>(at)];
  h->sum += value;
}

void Metrics::touch(const std::string& name, const Labels& labels) {
  std::lock_guard lock(mu_);
  (void)histogram(name, labels);
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
  // A misuse shows on every scrape (a comment line, which the format allows) instead of a throw
  // out of the request handler that made it.
  for (const auto& m : misuse_) out += "# tandem metrics misuse: " + m + "\n";
  return out;
}

}  // namespace tandem::engine::api
