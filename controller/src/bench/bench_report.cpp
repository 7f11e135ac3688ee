#include "bench_report.hpp"

#include <cstdio>
#include <map>
#include <set>

namespace tandem::bench {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

ordered_json opt(const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }

std::optional<double> read_opt(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

ordered_json spec_json(const prom::SpecCounters& s, bool measured) {
  if (!measured) return nullptr;  // /metrics did not answer: unknown, not zero
  ordered_json j{{"present", s.present}, {"source", s.source}, {"drafted", s.drafted}, {"accepted", s.accepted}};
  j["drafts"] = opt(s.drafts);
  j["acceptance"] = opt(s.acceptance());
  j["mean_acceptance_length"] = opt(s.mean_acceptance_length());
  return j;
}

std::string fmt(const std::optional<double>& v, int decimals = 1, const char* suffix = "") {
  if (!v) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, *v, suffix);
  return buf;
}

std::string pad(const std::string& s, std::size_t w, bool right = true) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string acceptance_text(const prom::SpecCounters& s, bool measured) {
  if (!measured) return "no /metrics";
  if (!s.present) return "no spec counters";
  if (!s.acceptance()) return "none drafted";
  std::string t = fmt(s.acceptance(), 3);
  if (auto len = s.mean_acceptance_length()) t += " (len " + fmt(len, 2) + ")";
  return t;
}

std::optional<double> ratio(const std::optional<double>& a, const std::optional<double>& b) {
  if (!a || !b || *b == 0) return std::nullopt;
  return *a / *b;
}

const Cell* find_cell(const Report& r, int c, const std::string& fixture) {
  for (const auto& cell : r.cells)
    if (cell.concurrency == c && cell.fixture == fixture) return &cell;
  return nullptr;
}

}  // namespace

ordered_json to_json(const Report& r) {
  ordered_json fixtures = ordered_json::array();
  std::vector<std::string> names;
  for (const auto& f : r.settings.fixtures) names.push_back(f.name);
  for (const auto& n : names) {
    bool measured = false;
    const auto s = r.fixture_spec(n, &measured);
    fixtures.push_back({{"name", n}, {"spec", spec_json(s, measured)}});
  }
  ordered_json cells = ordered_json::array();
  for (const auto& c : r.cells) {
    ordered_json reasons = ordered_json::array();
    for (const auto& [why, n] : c.failure_reasons) reasons.push_back({{"reason", why}, {"count", n}});
    cells.push_back({{"concurrency", c.concurrency},
                     {"fixture", c.fixture},
                     {"requests", c.requests},
                     {"failed", c.failed},
                     {"failure_reasons", reasons},
                     {"completion_tokens", c.tokens},
                     {"wall_seconds", c.wall_s},
                     {"decode_tok_s", {{"median", opt(c.decode_tok_s.p50)}, {"p10", opt(c.decode_tok_s.p10)}}},
                     {"aggregate_tok_s", opt(c.aggregate_tok_s)},
                     {"ttft_ms", {{"p50", opt(c.ttft_ms.p50)}, {"p99", opt(c.ttft_ms.p99)}}},
                     {"itl_ms", {{"p50", opt(c.itl_ms.p50)}, {"p99", opt(c.itl_ms.p99)}}},
                     {"spec", spec_json(c.spec, c.spec_measured)}});
  }
  const Config& s = r.settings;
  return {{"tool", "tandemctl bench"},
          {"url", r.url},
          {"model", r.model},
          {"started_at", r.started_at},
          {"settings",
           {{"concurrency", s.concurrency},
            {"rounds", s.rounds},
            {"max_tokens", s.max_tokens},
            {"ignore_eos", s.ignore_eos},
            {"temperature", s.temperature},
            {"fixtures", names}}},
          {"cells", cells},
          {"fixtures", fixtures},
          {"totals", {{"requests", r.requests()}, {"failed", r.failed()}}}};
}

Result<Report> from_json(const json& j, const std::string& source) {
  if (!j.is_object() || j.value("tool", "") != "tandemctl bench" || !j.contains("cells") || !j["cells"].is_array())
    return Error{source + ": not a `tandemctl bench --output json` report (no \"tool\": \"tandemctl bench\" with cells)"};
  Report r;
  r.url = j.value("url", "");
  r.model = j.value("model", "");
  r.started_at = j.value("started_at", "");
  if (j.contains("settings") && j["settings"].is_object()) {
    const json& s = j["settings"];
    if (s.contains("fixtures") && s["fixtures"].is_array())
      for (const auto& n : s["fixtures"])
        if (n.is_string()) r.settings.fixtures.push_back(Fixture{n.get<std::string>(), "", nullptr, {}});
    r.settings.rounds = s.value("rounds", 0);
    r.settings.max_tokens = s.value("max_tokens", 0);
  }
  for (std::size_t i = 0; i < j["cells"].size(); ++i) {
    const json& c = j["cells"][i];
    if (!c.is_object() || !c.contains("concurrency") || !c["concurrency"].is_number_integer() || !c.contains("fixture") ||
        !c["fixture"].is_string())
      return Error{source + ": cells[" + std::to_string(i) + "] has no concurrency and fixture"};
    Cell cell;
    cell.concurrency = c["concurrency"].get<int>();
    cell.fixture = c["fixture"].get<std::string>();
    cell.requests = c.value("requests", 0);
    cell.failed = c.value("failed", 0);
    cell.tokens = c.value("completion_tokens", 0LL);
    cell.wall_s = c.value("wall_seconds", 0.0);
    if (c.contains("decode_tok_s")) {
      cell.decode_tok_s.p50 = read_opt(c["decode_tok_s"], "median");
      cell.decode_tok_s.p10 = read_opt(c["decode_tok_s"], "p10");
    }
    cell.aggregate_tok_s = read_opt(c, "aggregate_tok_s");
    if (c.contains("ttft_ms")) cell.ttft_ms = {std::nullopt, read_opt(c["ttft_ms"], "p50"), read_opt(c["ttft_ms"], "p99")};
    if (c.contains("itl_ms")) cell.itl_ms = {std::nullopt, read_opt(c["itl_ms"], "p50"), read_opt(c["itl_ms"], "p99")};
    if (c.contains("spec") && c["spec"].is_object()) {
      cell.spec_measured = true;
      const json& s = c["spec"];
      cell.spec.present = s.value("present", false);
      cell.spec.source = s.value("source", "");
      cell.spec.drafted = s.value("drafted", 0.0);
      cell.spec.accepted = s.value("accepted", 0.0);
      cell.spec.drafts = read_opt(s, "drafts");
    }
    if (c.contains("failure_reasons") && c["failure_reasons"].is_array())
      for (const auto& f : c["failure_reasons"])
        if (f.is_object() && f.contains("reason") && f["reason"].is_string())
          cell.failure_reasons[f["reason"].get<std::string>()] = f.value("count", 0);
    r.cells.push_back(std::move(cell));
  }
  return r;
}

std::string render_table(const Report& r) {
  std::string out;
  out += "Bench of " + r.url + " (model " + r.model + "), " + std::to_string(r.settings.rounds) + (r.settings.rounds == 1 ? " round, " : " rounds, ") +
         std::to_string(r.settings.max_tokens) + " max tokens" + (r.settings.ignore_eos ? " (ignore_eos)" : "") + "\n\n";
  out += "    c  fixture    ok/req  decode tok/s   aggregate    TTFT ms          ITL ms         spec acceptance\n";
  out += "                          median   p10       tok/s     p50      p99     p50     p99\n";
  for (const auto& c : r.cells) {
    out += pad(std::to_string(c.concurrency), 5) + "  " + pad(c.fixture, 9, false) + pad(std::to_string(c.requests - c.failed) + "/" + std::to_string(c.requests), 8) +
           pad(fmt(c.decode_tok_s.p50), 8) + pad(fmt(c.decode_tok_s.p10), 6) + pad(fmt(c.aggregate_tok_s), 12) +
           pad(fmt(c.ttft_ms.p50, 0), 8) + pad(fmt(c.ttft_ms.p99, 0), 9) + pad(fmt(c.itl_ms.p50), 8) +
           pad(fmt(c.itl_ms.p99), 8) + "   " + acceptance_text(c.spec, c.spec_measured) + "\n";
  }
  std::set<std::string> seen;
  std::string spec;
  for (const auto& c : r.cells) {
    if (!seen.insert(c.fixture).second) continue;
    bool measured = false;
    const auto s = r.fixture_spec(c.fixture, &measured);
    spec += "  " + pad(c.fixture, 9, false) + " " + acceptance_text(s, measured);
    if (measured && s.present)
      spec += "  (accepted " + fmt(s.accepted, 0) + " of " + fmt(s.drafted, 0) + " drafted)";
    spec += "\n";
  }
  out += "\nSpeculative acceptance per fixture (accepted / drafted, from /metrics before and after):\n" + spec;
  std::map<std::string, int> reasons;
  for (const auto& c : r.cells)
    for (const auto& [why, n] : c.failure_reasons) reasons[why] += n;
  if (r.failed() == 0) {
    out += "\nFailures: none of " + std::to_string(r.requests()) + " requests.\n";
  } else {
    out += "\nFailures: " + std::to_string(r.failed()) + " of " + std::to_string(r.requests()) + " requests:\n";
    for (const auto& [why, n] : reasons) out += pad(std::to_string(n), 6) + " x " + why + "\n";
  }
  return out;
}

ordered_json compare_json(const Report& mine, const Report& other) {
  ordered_json cells = ordered_json::array();
  for (const auto& c : mine.cells) {
    const Cell* o = find_cell(other, c.concurrency, c.fixture);
    if (!o) continue;
    auto side = [](const Cell& x) {
      return ordered_json{{"aggregate_tok_s", opt(x.aggregate_tok_s)}, {"decode_tok_s_median", opt(x.decode_tok_s.p50)},
                          {"ttft_ms_p50", opt(x.ttft_ms.p50)}, {"itl_ms_p50", opt(x.itl_ms.p50)},
                          {"acceptance", x.spec_measured ? opt(x.spec.acceptance()) : ordered_json(nullptr)},
                          {"failed", x.failed}};
    };
    cells.push_back({{"concurrency", c.concurrency},
                     {"fixture", c.fixture},
                     {"this", side(c)},
                     {"other", side(*o)},
                     {"ratio",
                      {{"aggregate_tok_s", opt(ratio(c.aggregate_tok_s, o->aggregate_tok_s))},
                       {"decode_tok_s_median", opt(ratio(c.decode_tok_s.p50, o->decode_tok_s.p50))},
                       {"ttft_ms_p50", opt(ratio(c.ttft_ms.p50, o->ttft_ms.p50))},
                       {"itl_ms_p50", opt(ratio(c.itl_ms.p50, o->itl_ms.p50))}}}});
  }
  return {{"this", {{"url", mine.url}, {"model", mine.model}, {"started_at", mine.started_at}}},
          {"other", {{"url", other.url}, {"model", other.model}, {"started_at", other.started_at}}},
          {"cells", cells}};
}

std::string render_compare(const Report& mine, const Report& other) {
  std::string out = "\nThis run (" + mine.url + ", " + mine.model + ") against " + other.url + " (" + other.model +
                    ", " + other.started_at + "); ratio = this / other:\n\n";
  out += "    c  fixture     aggregate tok/s          decode median tok/s      TTFT p50 ms\n";
  out += "                  this   other  ratio      this   other  ratio      this   other  ratio\n";
  int matched = 0;
  for (const auto& c : mine.cells) {
    const Cell* o = find_cell(other, c.concurrency, c.fixture);
    if (!o) continue;
    ++matched;
    out += pad(std::to_string(c.concurrency), 5) + "  " + pad(c.fixture, 9, false) + pad(fmt(c.aggregate_tok_s), 7) +
           pad(fmt(o->aggregate_tok_s), 8) + pad(fmt(ratio(c.aggregate_tok_s, o->aggregate_tok_s), 2, "x"), 8) +
           pad(fmt(c.decode_tok_s.p50), 10) + pad(fmt(o->decode_tok_s.p50), 8) +
           pad(fmt(ratio(c.decode_tok_s.p50, o->decode_tok_s.p50), 2, "x"), 8) + pad(fmt(c.ttft_ms.p50, 0), 10) +
           pad(fmt(o->ttft_ms.p50, 0), 8) + pad(fmt(ratio(c.ttft_ms.p50, o->ttft_ms.p50), 2, "x"), 8) + "\n";
  }
  if (matched == 0) out += "  (no concurrency level and fixture in common)\n";
  return out;
}

}  // namespace tandem::bench
