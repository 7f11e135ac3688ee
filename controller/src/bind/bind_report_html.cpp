#include "bind_report_html.hpp"

#include <algorithm>
#include <cstdio>

#include "bind_timeline_svg.hpp"
#include "deadman_summary.hpp"
#include "bench/markup.hpp"

namespace tandem::ctl {
namespace {

using nlohmann::json;

// Colours match the legend of the timeline; printing keeps the backgrounds.
constexpr const char* kStyle = R"CSS(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1060px;color:#1b1b1b;padding:0 12px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}code,pre{font:12px ui-monospace,Menlo,Consolas,monospace}
pre{background:#f7f7f7;padding:6px;overflow:auto;max-height:320px;margin:4px 0}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}dl.summary dt{color:#555}dl.summary dd{margin:0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600}
.bound,.done,.passed{background:#2e7d32}.rolled_back,.undone{background:#8d6e63}.failed,.rollback_failed,.failed_unchanged{background:#c62828}
.begun,.aborted,.not-run{background:#9e9e9e}
svg{max-width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .tick{text-anchor:middle;fill:#666}svg .grid{stroke:#e3e3e3}svg .band{fill:#fafafa}
svg .bar.done{fill:#2e7d32}svg .bar.failed{fill:#c62828}svg .bar.begun{fill:#f9a825}svg .bar.undone{fill:#8d6e63}
svg .bar.rb-done{fill:#1565c0}svg .deadman{stroke:#6a1b9a;stroke-width:3}
svg .phase.p0{fill:#1565c0}svg .phase.p1{fill:#2e7d32}svg .phase.p2{fill:#ef6c00}svg .phase.p3{fill:#6a1b9a}
svg .phase.p4{fill:#00838f}svg .phase.p5{fill:#ad1457}svg .phase-label{fill:#fff}
tr.status-failed td{background:#fdecea}td.miss{background:#fdecea}details summary{cursor:pointer;color:#1565c0}
.muted{color:#777}
)CSS";

std::string e(const std::string& s) { return xml_escape(s); }
std::string str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}
long long ms(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<long long>() : 0;
}
std::string secs(long long v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", static_cast<double>(v) / 1000.0);
  return b;
}
std::string badge(const std::string& status) {
  std::string cls = status == "not run" ? "not-run" : status;
  return "<span class=\"badge " + e(cls) + "\">" + e(status) + "</span>";
}
std::string pretty(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace); }
std::string evidence_block(const json& j) {
  if (j.is_null() || (j.is_object() && j.empty())) return "";
  return "<details><summary>evidence</summary><pre>" + e(pretty(j)) + "</pre></details>";
}
const json& obj(const json& r, const char* k) {
  static const json empty = json::object();
  auto it = r.find(k);
  return it != r.end() && it->is_object() ? *it : empty;
}

std::string summary(const json& r) {
  std::string h = "<h1>Bind report: " + e(str(r, "bind")) + "</h1>\n<dl class=\"summary\">\n";
  auto row = [&](const std::string& k, const std::string& v) { h += "<dt>" + k + "</dt><dd>" + v + "</dd>\n"; };
  row("result", "<span id=\"result\">" + badge(str(r, "result")) + "</span>");
  row("bind id", "<code>" + e(str(r, "bind_id")) + "</code> (" + e(str(r, "kind")) + ")");
  row("manifest", "<code>" + e(str(r, "manifest")) + "</code> sha256 <code>" + e(str(r, "manifest_sha256").substr(0, 16)) + "</code>");
  row("started", e(str(r, "started")));
  row("written", e(str(r, "written")));
  if (ms(r, "started_ms") && ms(r, "written_ms")) row("duration", secs(ms(r, "written_ms") - ms(r, "started_ms")));
  const json& f = obj(r, "failed_step");
  if (!f.empty())
    row("failed", "step " + std::to_string(f.value("index", 0)) + " <code>" + e(str(f, "action")) + "</code> on " + e(str(f, "node")) +
                      ": " + e(str(f, "error")));
  return h + "</dl>\n";
}

std::string timeline(const json& r) {
  const std::string svg = render_timeline_svg(r);
  if (svg.empty()) return "<h2 id=\"timeline\">Timeline</h2><p class=\"muted\">No step started.</p>\n";
  return "<h2 id=\"timeline\">Timeline</h2>\n<p class=\"muted\">Each bar is one step on its node, from its journal record's "
         "begin to its end; hover for the step. The purple line under a row is that node's armed dead-man.</p>\n" + svg;
}

std::string startup(const json& r) {
  const json& by_node = obj(r, "engine_startup");
  std::string h = "<h2 id=\"startup\">Engine start-up</h2>\n";
  if (by_node.empty()) return h + "<p class=\"muted\">The engine reported no start-up phases (not tandem-serve, or it never served).</p>\n";
  for (const auto& [node, st] : by_node.items()) {
    if (!st.is_object()) continue;
    h += "<h3>" + e(node) + " <span class=\"muted\">(" + secs(ms(st, "total_ms")) + " to the last phase)</span></h3>\n" +
         render_startup_svg(st) + "<table class=\"startup-phases\"><tr><th>phase</th><th>status</th><th>took</th><th>detail</th></tr>\n";
    for (const auto& p : st.value("phases", json::array()))
      h += "<tr data-phase=\"" + e(str(p, "phase")) + "\"><td>" + e(str(p, "phase")) + "</td><td>" + e(str(p, "status")) +
           "</td><td class=\"num\">" + (str(p, "status") == "done" ? secs(ms(p, "ms")) : std::string("n/a")) + "</td><td>" +
           e(str(p, "detail")) + "</td></tr>\n";
    h += "</table>\n";
  }
  return h;
}

std::string deadman(const json& r) {
  const json& dm = obj(r, "deadman");
  std::string h = "<h2 id=\"deadman\">Dead-man</h2>\n";
  if (dm.empty()) return h + "<p class=\"muted\">No dead-man was armed.</p>\n";
  h += "<table><tr><th>node</th><th>backend</th><th>armed</th><th>would fire</th><th>disarmed</th></tr>\n";
  auto at = [](long long t) { return t ? utc_timestamp(t) : std::string("-"); };
  for (const auto& [node, d] : dm.items())
    h += "<tr data-node=\"" + e(node) + "\"><td>" + e(node) + "</td><td>" + e(str(d, "backend")) + "</td><td>" + at(ms(d, "armed_ms")) +
         "</td><td>" + at(ms(d, "deadline_ms")) + "</td><td>" +
         (ms(d, "disarmed_ms") ? at(ms(d, "disarmed_ms")) + " by the " + e(str(d, "disarmed_by")) : std::string("<b>still armed</b>")) +
         "</td></tr>\n";
  return h + "</table>\n";
}

std::string gates(const json& r) {
  std::string h = "<h2 id=\"gates\">Gates</h2>\n";
  const json list = r.value("gates", json::array());
  if (list.empty()) return h + "<p class=\"muted\">No gate ran.</p>\n";
  h += "<table><tr><th>gate</th><th>status</th><th>took</th><th>what came back</th></tr>\n";
  for (const auto& g : list) {
    const json& ev = g.value("evidence", json());
    const std::string detail = ev.is_object() ? str(ev, "detail") : "";
    char took[32] = "";
    if (ev.is_object() && ev.contains("seconds") && ev["seconds"].is_number()) std::snprintf(took, sizeof took, "%.2f s", ev["seconds"].get<double>());
    h += "<tr class=\"status-" + e(str(g, "status")) + "\"><td>" + e(str(g, "gate")) + "</td><td>" + badge(str(g, "status")) +
         "</td><td class=\"num\">" + took + "</td><td>" + e(detail.empty() ? str(g, "error") : detail) +
         evidence_block(ev.is_object() ? ev.value("evidence", json()) : json()) + "</td></tr>\n";
  }
  return h + "</table>\n";
}

std::string hashes(const json& r) {
  const json& hs = obj(r, "hashes");
  std::string h = "<h2 id=\"hashes\">Hashes across ranks</h2>\n";
  if (hs.empty()) return h + "<p class=\"muted\">The hashes were not compared.</p>\n";
  h += "<p>" + std::to_string(hs.value("files_compared", 0)) + " files compared; " +
       (hs.value("ok", false) ? std::string("all identical.") : std::to_string(hs.value("mismatches", json::array()).size()) + " differ.") + "</p>\n";
  const json& table = obj(hs, "table");
  if (table.empty()) return h;
  std::vector<std::string> nodes;
  for (const auto& [file, digests] : table.items())
    if (digests.is_object())
      for (const auto& [node, d] : digests.items())
        if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  h += "<table class=\"hashes\"><tr><th>file</th>";
  for (const auto& n : nodes) h += "<th>" + e(n) + "</th>";
  h += "</tr>\n";
  for (const auto& [file, digests] : table.items()) {
    if (!digests.is_object()) continue;
    h += "<tr><td><code>" + e(file) + "</code></td>";
    std::string first;
    for (const auto& n : nodes) {
      const json d = digests.value(n, json());
      const std::string sha = d.is_string() ? d.get<std::string>() : "";
      const bool differs = sha.empty() || (!first.empty() && sha != first);
      if (first.empty()) first = sha;
      h += std::string("<td") + (differs ? " class=\"miss\"" : "") + "><code title=\"" + e(sha) + "\">" +
           (sha.empty() ? std::string("missing") : e(sha.substr(0, 16))) + "</code></td>";
    }
    h += "</tr>\n";
  }
  return h + "</table>\n";
}

std::string steps(const json& r) {
  std::string h = "<h2 id=\"steps\">Steps</h2>\n<table class=\"steps\"><tr><th>#</th><th>node</th><th>action</th><th>status</th>"
                  "<th>took</th><th>result</th></tr>\n";
  for (const auto& s : r.value("steps", json::array())) {
    const std::string status = str(s, "status");
    const std::string note = !str(s, "error").empty() ? str(s, "error") : !str(s, "result").empty() ? str(s, "result") : str(s, "summary");
    h += "<tr class=\"status-" + e(status == "not run" ? "not-run" : status) + "\" data-index=\"" + std::to_string(s.value("index", 0)) +
         "\"><td class=\"num\">" + std::to_string(s.value("index", 0)) + "</td><td>" + e(str(s, "node")) + "</td><td><code>" +
         e(str(s, "action")) + "</code></td><td>" + badge(status) + (s.contains("undone_by") ? " " + badge("undone") : "") +
         "</td><td class=\"num\">" + (s.contains("ms") ? secs(ms(s, "ms")) : "") + "</td><td>" + e(note) +
         evidence_block(s.value("evidence", json())) + "</td></tr>\n";
  }
  return h + "</table>\n";
}

std::string rollback(const json& r) {
  const json& rb = obj(r, "rollback");
  if (rb.empty()) return "";
  std::string h = "<h2 id=\"rollback\">Rollback</h2>\n<p>Reason: " + e(str(rb, "reason")) +
                  "</p>\n<table><tr><th>task</th><th>node</th><th>status</th><th>took</th><th>detail</th></tr>\n";
  for (const auto& t : rb.value("tasks", json::array()))
    h += "<tr class=\"status-" + e(str(t, "status")) + "\"><td><code>" + e(str(t, "task")) + "</code></td><td>" + e(str(t, "node")) +
         "</td><td>" + badge(str(t, "status")) + "</td><td class=\"num\">" + secs(ms(t, "ms")) + "</td><td>" +
         e(str(t, "error").empty() ? str(t, "result") : str(t, "error")) + evidence_block(t.value("evidence", json())) + "</td></tr>\n";
  return h + "</table>\n";
}

}  // namespace

std::string render_report_html(const json& r, const std::string& bench_svg) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      // Nothing may be fetched: the page is whole as written.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>Bind report: " +
      e(str(r, "bind")) + " " + e(str(r, "bind_id")) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  h += summary(r) + timeline(r) + startup(r) + deadman(r) + gates(r);
  if (!bench_svg.empty())
    h += "<h2 id=\"bench\">Bench</h2>\n<p class=\"muted\">tok/s against concurrency, one line per fixture.</p>\n" + bench_svg;
  h += hashes(r) + steps(r) + rollback(r);
  h += "<p class=\"muted\">The same report as JSON and Markdown is next to this file.</p>\n</body>\n</html>\n";
  return h;
}

}  // namespace tandem::ctl
