// The bench chart as a self-contained SVG (no script, no external font or style), so it can sit
// next to the bind report and open in any browser.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "bench_report.hpp"
#include "markup.hpp"

namespace tandem::bench {

namespace {

std::string esc(const std::string& s) { return ctl::xml_escape(s); }

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// 1, 2 or 5 times a power of ten, at least v: a round top for the y axis.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

const char* colour(std::size_t i) {
  static const char* k[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  return k[i % 8];
}

struct Panel {
  double x, y, w, h;  // plot area
  std::string title;
  std::function<std::optional<double>(const Cell&)> value;
};

}  // namespace

std::string render_svg(const Report& r) {
  std::vector<int> levels;
  std::vector<std::string> fixtures;
  for (const auto& c : r.cells) {
    if (std::find(levels.begin(), levels.end(), c.concurrency) == levels.end()) levels.push_back(c.concurrency);
    if (std::find(fixtures.begin(), fixtures.end(), c.fixture) == fixtures.end()) fixtures.push_back(c.fixture);
  }
  std::sort(levels.begin(), levels.end());
  const double W = 960, H = 420;
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"960\" height=\"420\" viewBox=\"0 0 960 420\" "
                  "font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"" + num(W) + "\" height=\"" + num(H) + "\" fill=\"white\"/>\n";
  s += "<text x=\"480\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">tok/s against concurrency: " + esc(r.model) +
       " at " + esc(r.url) + "</text>\n";
  s += "<text x=\"480\" y=\"40\" text-anchor=\"middle\" fill=\"#555\">" + esc(r.started_at) + ", " +
       std::to_string(r.settings.max_tokens) + " max tokens, " + std::to_string(r.settings.rounds) + " rounds, " +
       std::to_string(r.failed()) + " failed of " + std::to_string(r.requests()) + " requests</text>\n";
  // Legend: one entry per fixture, across the top.
  for (std::size_t i = 0; i < fixtures.size(); ++i) {
    const double lx = 80 + 150.0 * static_cast<double>(i);
    s += "<line x1=\"" + num(lx) + "\" y1=\"58\" x2=\"" + num(lx + 24) + "\" y2=\"58\" stroke=\"" + colour(i) +
         "\" stroke-width=\"3\"/><text x=\"" + num(lx + 30) + "\" y=\"62\">" + esc(fixtures[i]) + "</text>\n";
  }
  const Panel panels[] = {
      {70, 90, 380, 270, "aggregate tok/s (all streams)", [](const Cell& c) { return c.aggregate_tok_s; }},
      {550, 90, 380, 270, "median decode tok/s per request", [](const Cell& c) { return c.decode_tok_s.p50; }}};
  for (const Panel& p : panels) {
    double top = 0;
    for (const auto& c : r.cells)
      if (auto v = p.value(c)) top = std::max(top, *v);
    top = nice_ceiling(top * 1.05);
    auto px = [&](int level) {
      if (levels.size() <= 1) return p.x + p.w / 2;
      const double span = levels.back() - levels.front();
      return p.x + p.w * (level - levels.front()) / span;
    };
    auto py = [&](double v) { return p.y + p.h - p.h * v / top; };
    s += "<text x=\"" + num(p.x + p.w / 2) + "\" y=\"" + num(p.y - 8) + "\" text-anchor=\"middle\">" + esc(p.title) + "</text>\n";
    s += "<rect x=\"" + num(p.x) + "\" y=\"" + num(p.y) + "\" width=\"" + num(p.w) + "\" height=\"" + num(p.h) +
         "\" fill=\"none\" stroke=\"#999\"/>\n";
    for (int t = 0; t <= 5; ++t) {
      const double v = top * t / 5, y = py(v);
      s += "<line x1=\"" + num(p.x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(p.x + p.w) + "\" y2=\"" + num(y) +
           "\" stroke=\"#eee\"/><text x=\"" + num(p.x - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
           num(v) + "</text>\n";
    }
    for (int l : levels)
      s += "<text x=\"" + num(px(l)) + "\" y=\"" + num(p.y + p.h + 18) + "\" text-anchor=\"middle\">" +
           std::to_string(l) + "</text>\n";
    s += "<text x=\"" + num(p.x + p.w / 2) + "\" y=\"" + num(p.y + p.h + 36) + "\" text-anchor=\"middle\">concurrency</text>\n";
    for (std::size_t i = 0; i < fixtures.size(); ++i) {
      std::string points, marks;
      for (int l : levels)
        for (const auto& c : r.cells)
          if (c.concurrency == l && c.fixture == fixtures[i])
            if (auto v = p.value(c)) {
              points += num(px(l)) + "," + num(py(*v)) + " ";
              marks += "<circle cx=\"" + num(px(l)) + "\" cy=\"" + num(py(*v)) + "\" r=\"3\" fill=\"" + colour(i) +
                       "\"><title>" + esc(fixtures[i]) + " c=" + std::to_string(l) + ": " + num(*v) + " tok/s</title></circle>\n";
            }
      if (!points.empty())
        s += "<polyline fill=\"none\" stroke=\"" + std::string(colour(i)) + "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
      s += marks;
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace tandem::bench
