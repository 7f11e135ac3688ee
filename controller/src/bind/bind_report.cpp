#include "bind_report.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "bench/bench_report.hpp"
#include "bind_report_html.hpp"
#include "bind_steps.hpp"
#include "tandem/utf8.hpp"

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
  return s.size() > 160 ? utf8::clip(s, 157) : s;  // 160 bytes at most, "..." included
}

json step_entry(const Step& s, const StepRecord* r, int writing_step) {
  json j{{"index", s.index}, {"phase", s.phase}, {"node", s.node}, {"action", s.id()}, {"summary", s.summary}};
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
  if (r->started_ms) j["started_ms"] = r->started_ms;  // unix ms, for the timeline
  if (r->ended_ms) j["ended_ms"] = r->ended_ms;
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

// The bench gate's evidence is a whole `tandemctl bench` report: chart it (tok/s against
// concurrency, one line per fixture), as `tandemctl bench --svg` would. Returns the SVG, or ""
// when this bind ran no bench gate (or it failed before measuring anything).
Result<std::string> bench_chart(const json& report) {
  for (const auto& g : report["gates"]) {
    if (g.value("gate", "") != "bench" || !g["evidence"].is_object()) continue;
    const json& measured = g["evidence"].value("evidence", json());
    if (!measured.is_object() || !measured.contains("cells")) continue;
    auto bench_report = bench::from_json(measured, "bench gate evidence");
    if (!bench_report) return bench_report.error();
    return bench::render_svg(*bench_report);
  }
  return std::string();
}

// The rollback task that reverses a plan step (see rollback_runner.cpp), or "".
std::string undo_task(const BindContext& ctx, const Step& s) {
  if (!agent_step_name(s.action).empty()) return "undo:" + ctx.op_for_step(s.index);
  if (is_stop(s.action)) return "undo:" + ctx.op_for(s.node, "stop");
  if (s.action == Action::engine_start) return "stop-rank:" + s.node;
  if (s.action == Action::deadman_arm) return "disarm:" + s.node;
  return "";
}

// Each node's dead-man: when it was armed, when it would have fired, when it was disarmed (by
// the bind's finish or by the rollback), from the arm and disarm steps' records and evidence.
json deadman_times(const BindContext& ctx) {
  json out = json::object();
  auto when = [](const StepRecord& r) { return r.done ? r.ended_ms : 0LL; };
  for (const auto& s : ctx.plan.steps) {
    auto it = ctx.run.steps.find(s.index);
    if (it == ctx.run.steps.end() || (s.action != Action::deadman_arm && s.action != Action::deadman_disarm) || !when(it->second)) continue;
    json& n = out[s.node];  // only a node whose arm or disarm step is done has an entry
    if (s.action == Action::deadman_arm) {
      n["armed_ms"] = when(it->second);
      const json dm = it->second.evidence.is_object() ? it->second.evidence.value("deadman", json::object()) : json::object();
      if (dm.is_object() && dm.contains("seconds_left") && dm["seconds_left"].is_number())
        n["deadline_ms"] = when(it->second) + static_cast<long long>(dm["seconds_left"].get<double>() * 1000);
      if (dm.is_object() && dm.contains("backend")) n["backend"] = dm["backend"];
    } else {
      n["disarmed_ms"] = when(it->second);
      n["disarmed_by"] = "bind";
    }
  }
  for (const auto& [key, r] : ctx.run.rollback)
    if (key.starts_with("disarm:") && r.done && out.contains(key.substr(7))) {
      out[key.substr(7)]["disarmed_ms"] = r.ended_ms;
      out[key.substr(7)]["disarmed_by"] = "rollback";
    }
  return out;
}

}  // namespace

json build_report(const BindContext& ctx, const std::string& result, int writing_step) {
  const BindRun& run = ctx.run;
  json steps = json::array(), gates = json::array(), hashes = nullptr, startup = nullptr;
  json failed = nullptr;
  for (const auto& s : ctx.plan.steps) {
    auto it = run.steps.find(s.index);
    json e = step_entry(s, it == run.steps.end() ? nullptr : &it->second, writing_step);
    if (const std::string undo = undo_task(ctx, s); !undo.empty() && e["status"] != "not run") {
      auto u = run.rollback.find(undo);
      if (u != run.rollback.end() && u->second.done) e["undone_by"] = undo;
    }
    if (s.action == Action::serve_wait && e.contains("evidence") && e["evidence"].is_object() && e["evidence"].contains("startup"))
      startup = e["evidence"]["startup"];
    if (e["status"] == "failed" && failed.is_null())
      failed = {{"index", s.index}, {"node", s.node}, {"action", s.id()}, {"error", e.value("error", "")}};
    if (s.action == Action::hashes_compare && e.contains("evidence")) hashes = e["evidence"];
    if (s.action == Action::gate) gates.push_back({{"gate", s.gate}, {"status", e["status"]}, {"evidence", e.value("evidence", json())}, {"error", e.value("error", "")}});
    steps.push_back(std::move(e));
  }
  json rollback = nullptr;
  if (run.rollback_begun) {
    // In the order they ran (the journal keys them by name).
    std::vector<std::pair<std::string, const StepRecord*>> order;
    for (const auto& [key, r] : run.rollback) order.emplace_back(key, &r);
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->started_ms < b.second->started_ms; });
    json tasks = json::array();
    for (const auto& [key, r] : order)
      tasks.push_back({{"task", key}, {"node", r->node}, {"status", r->done ? "done" : r->failed ? "failed" : "begun"},
                       {"op_id", r->op_id}, {"result", r->note}, {"started_ms", r->started_ms}, {"ended_ms", r->ended_ms},
                       {"ms", r->ended_ms && r->started_ms ? r->ended_ms - r->started_ms : 0}, {"error", r->error},
                       {"evidence", r->evidence}});
    rollback = {{"reason", run.rollback_reason}, {"tasks", tasks}};
  }
  const long long written = now_ms();
  return {{"bind", ctx.m.name},          {"bind_id", run.bind_id},     {"kind", run.kind},
          {"manifest", ctx.m.file},      {"manifest_sha256", run.manifest_sha256},
          {"started", utc(run.started_ms)}, {"written", utc(written)}, {"started_ms", run.started_ms},
          {"written_ms", written},       {"result", result},
          {"failed_step", failed},       {"steps", steps},             {"hashes", hashes},
          {"gates", gates},              {"rollback", rollback},       {"deadman", deadman_times(ctx)},
          {"engine_startup", startup}};
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
  if (r["deadman"].is_object() && !r["deadman"].empty()) {
    md += "\n## Dead-man\n\n| node | armed | would fire | disarmed |\n|---|---|---|---|\n";
    for (const auto& [node, d] : r["deadman"].items())
      if (d.is_object())
        md += "| " + node + " | " + utc(d.value("armed_ms", 0LL)) + " | " + utc(d.value("deadline_ms", 0LL)) + " | " +
            (d.contains("disarmed_ms") ? utc(d.value("disarmed_ms", 0LL)) + " (" + d.value("disarmed_by", "") + ")" : std::string("still armed")) +
            " |\n";
  }
  if (r["engine_startup"].is_object())
    for (const auto& [node, st] : r["engine_startup"].items()) {
      if (!st.is_object()) continue;
      md += "\n## Engine start-up on " + node + "\n\n| phase | status | ms | detail |\n|---|---|---|---|\n";
      for (const auto& p : st.value("phases", json::array()))
        md += "| " + p.value("phase", "") + " | " + p.value("status", "") + " | " +
              (p.contains("ms") ? std::to_string(p.value("ms", 0LL)) : std::string()) + " | " + md_cell(p.value("detail", "")) + " |\n";
    }
  md += "\nThe timeline and every step's evidence: the HTML report next to this file (the JSON has it all too).\n";
  return md;
}

static Result<ReportFiles> write_report_files(BindContext& ctx, const std::string& result, int writing_step);

Result<ReportFiles> write_report(BindContext& ctx, const std::string& result, int writing_step) {
  const std::string dir = ctx.bind_dir + "/reports";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{dir + ": " + ec.message()};
  // Evidence comes from agents and engines; a shape nobody expected must cost the report, never
  // the controller (an exception here would escape the bind's rollback path).
  try {
    return write_report_files(ctx, result, writing_step);
  } catch (const json::exception& e) {
    return Error{"writing the bind report: unexpected evidence: " + std::string(e.what())};
  }
}

static Result<ReportFiles> write_report_files(BindContext& ctx, const std::string& result, int writing_step) {
  const std::string dir = ctx.bind_dir + "/reports";
  json report = build_report(ctx, result, writing_step);
  const std::string base = dir + "/" + ctx.run.bind_id;
  ReportFiles f{base + ".md", base + ".json", base + ".html", ""};
  auto chart = bench_chart(report);
  if (!chart) return chart.error();
  if (!chart->empty()) {
    f.bench_svg = base + ".bench.svg";
    if (auto st = write_file(f.bench_svg, *chart); !st) return st.error();
    report["bench_svg"] = f.bench_svg;
  }
  report["html"] = f.html;
  if (auto st = write_file(f.json, report.dump(2) + "\n"); !st) return st.error();
  if (auto st = write_file(f.markdown, render_report_markdown(report)); !st) return st.error();
  if (auto st = write_file(f.html, render_report_html(report, *chart)); !st) return st.error();
  if (auto st = ctx.record({{"event", "report.written"}, {"path", f.markdown}, {"json", f.json}, {"html", f.html}}); !st)
    return st.error();
  return f;
}

}  // namespace tandem::ctl
