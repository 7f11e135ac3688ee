#include "bind_report.hpp"

#include <ctime>
#include <filesystem>
#include <fstream>

#include "bench_report.hpp"

namespace tandem::ctl {
namespace {

std::string utc(long long ms) {
  if (ms <= 0) return "";
  std::time_t t = ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

std::string md_cell(std::string s) {
  for (auto& c : s)
    if (c == '|' || c == '\n') c = c == '|' ? '/' : ' ';
  return s.size() > 160 ? s.substr(0, 157) + "..." : s;
}

json step_entry(const Step& s, const StepRecord* r, int writing_step) {
  json j{{"index", s.index}, {"phase", s.phase}, {"node", s.node}, {"action", s.action}, {"summary", s.summary}};
  if (s.index == writing_step && writing_step > 0) {
    j["status"] = "done";
    return j;
  }
  if (!r) {
    j["status"] = "not run";
    return j;
  }
  j["status"] = r->done ? "done" : r->failed ? "failed" : "begun";
  j["op_id"] = r->op_id;
  if (r->started_ms && r->ended_ms) j["ms"] = r->ended_ms - r->started_ms;
  if (!r->error.empty()) j["error"] = r->error;
  if (!r->note.empty()) j["result"] = r->note;
  j["evidence"] = r->evidence;
  return j;
}

Status write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return Error{tmp + ": cannot write"};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error{path + ": " + ec.message()};
  return {};
}

// The bench gate's evidence is a whole `tandemctl bench` report: chart it beside the bind report
// (tok/s against concurrency, one line per fixture), as `tandemctl bench --svg` would. Returns the
// path written, or "" when this bind ran no bench gate (or it failed before measuring anything).
Result<std::string> write_bench_chart(const json& report, const std::string& path) {
  for (const auto& g : report["gates"]) {
    if (g.value("gate", "") != "bench" || !g["evidence"].is_object()) continue;
    const json& measured = g["evidence"].value("evidence", json());
    if (!measured.is_object() || !measured.contains("cells")) continue;
    auto bench_report = bench::from_json(measured, "bench gate evidence");
    if (!bench_report) return bench_report.error();
    if (auto st = write_file(path, bench::render_svg(*bench_report)); !st) return st.error();
    return path;
  }
  return std::string();
}

}  // namespace

json build_report(const BindContext& ctx, const std::string& result, int writing_step) {
  const BindRun& run = ctx.run;
  json steps = json::array(), gates = json::array(), hashes = nullptr;
  json failed = nullptr;
  for (const auto& s : ctx.plan.steps) {
    auto it = run.steps.find(s.index);
    json e = step_entry(s, it == run.steps.end() ? nullptr : &it->second, writing_step);
    if (e["status"] == "failed" && failed.is_null())
      failed = {{"index", s.index}, {"node", s.node}, {"action", s.action}, {"error", e.value("error", "")}};
    if (s.action == "hashes.compare" && e.contains("evidence")) hashes = e["evidence"];
    if (s.action.starts_with("gate.")) gates.push_back({{"gate", s.action.substr(5)}, {"status", e["status"]}, {"evidence", e.value("evidence", json())}, {"error", e.value("error", "")}});
    steps.push_back(std::move(e));
  }
  json rollback = nullptr;
  if (run.rollback_begun) {
    json tasks = json::array();
    for (const auto& [key, r] : run.rollback)
      tasks.push_back({{"task", key}, {"status", r.done ? "done" : r.failed ? "failed" : "begun"}, {"op_id", r.op_id}, {"result", r.note},
                       {"ms", r.ended_ms && r.started_ms ? r.ended_ms - r.started_ms : 0}, {"error", r.error},
                       {"evidence", r.evidence}});
    rollback = {{"reason", run.rollback_reason}, {"tasks", tasks}};
  }
  return {{"bind", ctx.m.name},          {"bind_id", run.bind_id},     {"kind", run.kind},
          {"manifest", ctx.m.file},      {"manifest_sha256", run.manifest_sha256},
          {"started", utc(run.started_ms)}, {"written", utc(now_ms())}, {"result", result},
          {"failed_step", failed},       {"steps", steps},             {"hashes", hashes},
          {"gates", gates},              {"rollback", rollback}};
}

std::string render_report_markdown(const json& r) {
  std::string md = "# Bind report: " + r.value("bind", "") + "\n\n";
  md += "- bind id: `" + r.value("bind_id", "") + "`\n- manifest: `" + r.value("manifest", "") + "` (sha256 `" +
        r.value("manifest_sha256", "").substr(0, 16) + "`)\n- started: " + r.value("started", "") +
        "\n- written: " + r.value("written", "") + "\n- **result: " + r.value("result", "") + "**\n";
  if (r["failed_step"].is_object())
    md += "- failed: step " + std::to_string(r["failed_step"].value("index", 0)) + " `" +
          r["failed_step"].value("action", "") + "` on " + r["failed_step"].value("node", "") + ": " +
          md_cell(r["failed_step"].value("error", "")) + "\n";
  md += "\n## Steps\n\n| # | node | action | status | ms | result |\n|---|---|---|---|---|---|\n";
  for (const auto& s : r["steps"]) {
    std::string ms = s.contains("ms") ? std::to_string(s["ms"].get<long long>()) : "";
    std::string note = s.contains("error")    ? s["error"].get<std::string>()
                       : s.contains("result") ? s["result"].get<std::string>()
                                              : s.value("summary", "");
    md += "| " + std::to_string(s.value("index", 0)) + " | " + s.value("node", "") + " | `" + s.value("action", "") +
          "` | " + s.value("status", "") + " | " + ms + " | " + md_cell(note) + " |\n";
  }
  if (r["hashes"].is_object()) {
    md += "\n## Hashes\n\n" + std::to_string(r["hashes"].value("files_compared", 0)) + " files compared across ranks; ";
    md += r["hashes"]["mismatches"].empty() ? std::string("all identical.\n") : std::string("mismatches:\n\n");
    for (const auto& m : r["hashes"]["mismatches"]) md += "- `" + m.value("file", "") + "`: " + m.value("reason", "") + " " + m["digests"].dump() + "\n";
  }
  if (!r["gates"].empty()) {
    md += "\n## Gates\n\n| gate | status | detail |\n|---|---|---|\n";
    for (const auto& g : r["gates"])
      md += "| " + g.value("gate", "") + " | " + g.value("status", "") + " | " +
            md_cell(g.value("error", "").empty() ? g["evidence"].dump() : g.value("error", "")) + " |\n";
  }
  if (r["rollback"].is_object()) {
    md += "\n## Rollback\n\nreason: " + md_cell(r["rollback"].value("reason", "")) +
          "\n\n| task | status | ms | detail |\n|---|---|---|---|\n";
    for (const auto& t : r["rollback"]["tasks"])
      md += "| `" + t.value("task", "") + "` | " + t.value("status", "") + " | " + std::to_string(t.value("ms", 0LL)) +
            " | " + md_cell(!t.value("error", "").empty() ? t.value("error", "") : t.value("result", "")) + " |\n";
  }
  if (r.contains("bench_svg"))
    md += "\nBench chart (tok/s against concurrency, one line per fixture): `" +
          std::filesystem::path(r.value("bench_svg", "")).filename().string() + "`\n";
  md += "\nEvidence for every step is in the JSON report next to this file.\n";
  return md;
}

Result<ReportFiles> write_report(BindContext& ctx, const std::string& result, int writing_step) {
  const std::string dir = ctx.bind_dir + "/reports";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{dir + ": " + ec.message()};
  const json report = build_report(ctx, result, writing_step);
  ReportFiles f{dir + "/" + ctx.run.bind_id + ".md", dir + "/" + ctx.run.bind_id + ".json", ""};
  json with_chart = report;
  if (auto chart = write_bench_chart(report, dir + "/" + ctx.run.bind_id + ".bench.svg"); !chart)
    return chart.error();
  else if (!chart->empty()) {
    f.bench_svg = *chart;
    with_chart["bench_svg"] = *chart;
  }
  if (auto st = write_file(f.json, with_chart.dump(2) + "\n"); !st) return st.error();
  if (auto st = write_file(f.markdown, render_report_markdown(with_chart)); !st) return st.error();
  if (auto st = ctx.record({{"event", "report.written"}, {"path", f.markdown}, {"json", f.json}}); !st) return st.error();
  return f;
}

}  // namespace tandem::ctl
