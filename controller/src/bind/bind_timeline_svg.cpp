#include "bind_timeline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/markup.hpp"

namespace tandem::ctl {
namespace {

using nlohmann::json;

constexpr double kLabel = 180, kPlot = 800, kRow = 26, kBar = 16, kTop = 34;

struct Bar {
  std::string row, cls, title;
  std::string attrs;  // data-* for tests and tooltips
  long long start = 0, end = 0;
};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string seconds(long long ms) {
  char b[32];
  std::snprintf(b, sizeof b, ms < 10000 ? "%.2f s" : "%.1f s", static_cast<double>(ms) / 1000.0);
  return b;
}

// A round tick spacing (1, 2 or 5 times a power of ten milliseconds) giving at most ~8 ticks.
long long tick_step(long long span) {
  const double raw = std::max(1.0, static_cast<double>(span) / 8.0);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return static_cast<long long>(m * p);
  return static_cast<long long>(10 * p);
}

long long ms_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<long long>() : 0;
}

std::string str_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<Bar> bars_of(const json& report, long long fallback_end) {
  std::vector<Bar> bars;
  for (const auto& s : report.value("steps", json::array())) {
    const long long start = ms_of(s, "started_ms");
    if (!start) continue;
    Bar b;
    b.row = str_of(s, "node");
    const std::string status = str_of(s, "status");
    const bool undone = s.contains("undone_by");
    b.cls = undone ? "undone" : status == "done" ? "done" : status == "failed" ? "failed" : "begun";
    b.start = start;
    b.end = std::max(start, ms_of(s, "ended_ms") ? ms_of(s, "ended_ms") : fallback_end);
    b.title = std::to_string(s.value("index", 0)) + ". " + str_of(s, "action") + " on " + b.row + ": " + status +
              (undone ? ", undone by the rollback" : "") + ", " + seconds(b.end - b.start);
    b.attrs = " data-index=\"" + std::to_string(s.value("index", 0)) + "\" data-action=\"" + xml_escape(str_of(s, "action")) +
              "\" data-status=\"" + xml_escape(status) + "\"" + (undone ? " data-undone=\"true\"" : "");
    bars.push_back(std::move(b));
  }
  const json& rb = report.contains("rollback") && report["rollback"].is_object() ? report["rollback"] : json::object();
  for (const auto& t : rb.value("tasks", json::array())) {
    const long long start = ms_of(t, "started_ms");
    if (!start) continue;
    Bar b;
    const std::string node = str_of(t, "node");
    b.row = "rollback: " + (node.empty() ? std::string("?") : node);
    const std::string status = str_of(t, "status");
    b.cls = status == "done" ? "rb-done" : status == "failed" ? "failed" : "begun";
    b.start = start;
    b.end = std::max(start, ms_of(t, "ended_ms") ? ms_of(t, "ended_ms") : fallback_end);
    b.title = "rollback " + str_of(t, "task") + ": " + status + ", " + seconds(b.end - b.start);
    b.attrs = " data-task=\"" + xml_escape(str_of(t, "task")) + "\" data-status=\"" + xml_escape(status) + "\"";
    bars.push_back(std::move(b));
  }
  return bars;
}

}  // namespace

std::string render_timeline_svg(const json& report) {
  const long long written = ms_of(report, "written_ms");
  std::vector<Bar> bars = bars_of(report, written);
  if (bars.empty()) return "";
  long long t0 = bars.front().start, t1 = bars.front().end;
  std::vector<std::string> rows;
  for (const auto& b : bars) {
    t0 = std::min(t0, b.start);
    t1 = std::max(t1, b.end);
    if (std::find(rows.begin(), rows.end(), b.row) == rows.end()) rows.push_back(b.row);
  }
  const long long span = std::max(1LL, t1 - t0);
  auto x = [&](long long t) { return kLabel + kPlot * static_cast<double>(std::clamp(t, t0, t1) - t0) / static_cast<double>(span); };
  auto y = [&](const std::string& row) {
    return kTop + kRow * static_cast<double>(std::find(rows.begin(), rows.end(), row) - rows.begin());
  };
  const double height = kTop + kRow * static_cast<double>(rows.size()) + 34;
  const double width = kLabel + kPlot + 20;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                  "\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" data-t0-ms=\"" + std::to_string(t0) +
                  "\" data-t1-ms=\"" + std::to_string(t1) + "\" role=\"img\" aria-label=\"steps over time, one row per node\">\n";
  // Axis: seconds since the first step began.
  const long long step = tick_step(span);
  for (long long t = 0; t <= span; t += step) {
    const double tx = x(t0 + t);
    s += "<line class=\"grid\" x1=\"" + num(tx) + "\" y1=\"" + num(kTop - 6) + "\" x2=\"" + num(tx) + "\" y2=\"" +
         num(height - 28) + "\"/><text class=\"tick\" x=\"" + num(tx) + "\" y=\"" + num(kTop - 10) + "\">" + seconds(t) + "</text>\n";
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const double ry = kTop + kRow * static_cast<double>(i);
    if (i % 2 == 0)
      s += "<rect class=\"band\" x=\"0\" y=\"" + num(ry) + "\" width=\"" + num(width) + "\" height=\"" + num(kRow) + "\"/>\n";
    s += "<text class=\"row\" x=\"6\" y=\"" + num(ry + kRow / 2 + 4) + "\">" + xml_escape(rows[i]) + "</text>\n";
  }
  // Each node's dead-man window: armed until disarmed (or to the end of the chart).
  const json& dm = report.contains("deadman") && report["deadman"].is_object() ? report["deadman"] : json::object();
  for (const auto& [node, d] : dm.items()) {
    if (!d.is_object() || !ms_of(d, "armed_ms") || std::find(rows.begin(), rows.end(), node) == rows.end()) continue;
    const long long a = ms_of(d, "armed_ms"), z = ms_of(d, "disarmed_ms") ? ms_of(d, "disarmed_ms") : t1;
    const double ly = y(node) + kRow - 3;
    s += "<line class=\"deadman\" data-node=\"" + xml_escape(node) + "\" x1=\"" + num(x(a)) + "\" y1=\"" + num(ly) + "\" x2=\"" +
         num(x(z)) + "\" y2=\"" + num(ly) + "\"><title>dead-man on " + xml_escape(node) + ": armed at +" + seconds(a - t0) +
         (ms_of(d, "disarmed_ms") ? ", disarmed at +" + seconds(z - t0) : std::string(", still armed")) + "</title></line>\n";
  }
  for (const auto& b : bars) {
    const double bx = x(b.start), bw = std::max(2.0, x(b.end) - bx);
    s += "<rect class=\"bar " + b.cls + "\" data-node=\"" + xml_escape(b.row) + "\"" + b.attrs + " data-start-ms=\"" +
         std::to_string(b.start) + "\" data-end-ms=\"" + std::to_string(b.end) + "\" x=\"" + num(bx) + "\" y=\"" +
         num(y(b.row) + (kRow - kBar) / 2 - 2) + "\" width=\"" + num(bw) + "\" height=\"" + num(kBar) + "\" rx=\"2\"><title>" +
         xml_escape(b.title) + "</title></rect>\n";
  }
  // Legend.
  double lx = kLabel;
  const double ly = height - 14;
  for (const auto& [cls, label] : std::vector<std::pair<std::string, std::string>>{
           {"done", "done"}, {"failed", "failed"}, {"begun", "begun, never ended"}, {"undone", "undone by the rollback"},
           {"rb-done", "rollback task"}}) {
    s += "<rect class=\"bar " + cls + "\" x=\"" + num(lx) + "\" y=\"" + num(ly - 9) + "\" width=\"12\" height=\"10\"/><text class=\"legend\" x=\"" +
         num(lx + 16) + "\" y=\"" + num(ly) + "\">" + label + "</text>\n";
    lx += 24 + 7.0 * static_cast<double>(label.size());
  }
  s += "<line class=\"deadman\" x1=\"" + num(lx) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(lx + 14) + "\" y2=\"" + num(ly - 4) +
       "\"/><text class=\"legend\" x=\"" + num(lx + 18) + "\" y=\"" + num(ly) + "\">dead-man armed</text>\n";
  return s + "</svg>\n";
}

std::string render_startup_svg(const json& startup) {
  std::vector<std::pair<std::string, long long>> done;
  long long total = 0;
  for (const auto& p : startup.value("phases", json::array()))
    if (str_of(p, "status") == "done") {
      done.emplace_back(str_of(p, "phase"), ms_of(p, "ms"));
      total += ms_of(p, "ms");
    }
  if (done.empty()) return "";
  const double w = kPlot, h = 40;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"startup\" viewBox=\"0 0 " + num(w + 10) + " " + num(h) +
                  "\" width=\"" + num(w + 10) + "\" height=\"" + num(h) + "\" role=\"img\" aria-label=\"engine start-up phases\">\n";
  double px = 0;
  size_t i = 0;
  for (const auto& [name, ms] : done) {
    const double pw = total > 0 ? w * static_cast<double>(ms) / static_cast<double>(total) : w / static_cast<double>(done.size());
    s += "<rect class=\"phase p" + std::to_string(i++ % 6) + "\" data-phase=\"" + xml_escape(name) + "\" data-ms=\"" +
         std::to_string(ms) + "\" x=\"" + num(px) + "\" y=\"4\" width=\"" + num(std::max(1.0, pw)) + "\" height=\"22\"><title>" +
         xml_escape(name) + ": " + seconds(ms) + "</title></rect>\n";
    if (pw > 70) s += "<text class=\"phase-label\" x=\"" + num(px + 4) + "\" y=\"19\">" + xml_escape(name) + " " + seconds(ms) + "</text>\n";
    px += pw;
  }
  return s + "</svg>\n";
}

}  // namespace tandem::ctl
