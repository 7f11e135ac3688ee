#include "prometheus_text.hpp"

#include <cstdlib>
#include <sstream>

namespace tandem::prom {

std::map<std::string, double> sum_by_name(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos || name_end == 0) continue;
    std::size_t value_at = name_end;
    if (line[name_end] == '{') {
      // Label values may hold '}' inside quotes; find the closing brace outside them.
      bool quoted = false;
      std::size_t i = name_end + 1;
      for (; i < line.size(); ++i) {
        if (line[i] == '\\' && quoted) ++i;
        else if (line[i] == '"') quoted = !quoted;
        else if (line[i] == '}' && !quoted) break;
      }
      if (i >= line.size()) continue;
      value_at = i + 1;
    }
    const char* begin = line.c_str() + value_at;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) continue;
    out[line.substr(0, name_end)] += v;
  }
  return out;
}

std::optional<double> SpecCounters::acceptance() const {
  if (drafted <= 0) return std::nullopt;
  return accepted / drafted;
}

std::optional<double> SpecCounters::mean_acceptance_length() const {
  if (!drafts || *drafts <= 0) return std::nullopt;
  return 1.0 + accepted / *drafts;
}

SpecCounters SpecCounters::minus(const SpecCounters& b) const {
  SpecCounters d = *this;
  d.present = present && b.present;
  d.drafted = drafted - b.drafted;
  d.accepted = accepted - b.accepted;
  if (drafts && b.drafts) d.drafts = *drafts - *b.drafts;
  else d.drafts.reset();
  return d;
}

nlohmann::json SpecCounters::to_json() const {
  nlohmann::json j{{"present", present}, {"source", source}, {"drafted", drafted}, {"accepted", accepted}};
  j["drafts"] = drafts ? nlohmann::json(*drafts) : nlohmann::json(nullptr);
  j["acceptance"] = acceptance() ? nlohmann::json(*acceptance()) : nlohmann::json(nullptr);
  j["mean_acceptance_length"] = mean_acceptance_length() ? nlohmann::json(*mean_acceptance_length()) : nlohmann::json(nullptr);
  return j;
}

SpecCounters spec_counters(const std::string& metrics_text) {
  const auto m = sum_by_name(metrics_text);
  struct Names {
    const char* source;
    const char* drafted;
    const char* accepted;
    const char* drafts;
  };
  // tandem-serve's names (engine/serve/serve_metrics.cpp), then vLLM's (v1 engine).
  for (const Names& n : {Names{"tandem", "tandem_spec_decode_draft_tokens_total", "tandem_spec_decode_accepted_tokens_total",
                               "tandem_spec_decode_drafts_total"},
                         Names{"vllm", "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
                               "vllm:spec_decode_num_drafts_total"}}) {
    auto d = m.find(n.drafted);
    auto a = m.find(n.accepted);
    if (d == m.end() || a == m.end()) continue;
    SpecCounters c;
    c.present = true;
    c.source = n.source;
    c.drafted = d->second;
    c.accepted = a->second;
    if (auto s = m.find(n.drafts); s != m.end()) c.drafts = s->second;
    return c;
  }
  return {};
}

}  // namespace tandem::prom
