// The bind report's model and HTML without a cluster: a run folded from journal records with
// known times becomes the JSON report (step times, what the rollback undid, dead-man times, the
// engine's start-up phases) and a page whose timeline bars are exactly the JSON's steps; and the
// history reader turns a journal back into runs with their result, failed step and report.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <map>

#include "bind/bind_history.hpp"
#include "bind/bind_report.hpp"
#include "bind/bind_report_html.hpp"
#include "report_dom.hpp"

using namespace tandem;
using namespace tandem::ctl;

namespace {

const char* kManifest = R"(apiVersion: tandem/v1
kind: Bind
metadata: {name: rep}
nodes:
  - {name: n0, address: 127.0.0.1, role: head}
engine:
  binary: /opt/tandem/bin/tandem-serve
  model_dir: /models/m
  run_user: root
  cache_dir: /var/cache/tandem
  serve: {port: 18888, tensor_parallel_size: 1, device: cpu, enable_auto_tool_choice: true, tool_call_parser: glm47}
hygiene:
  cron: {patterns: ['8888']}
deadman: {delay: 70m, backend: agent}
rollback:
  commands: [{on: head, run: [/opt/restore.sh]}]
  verify: {url: 'http://127.0.0.1:18888/health'}
)";

const long long T0 = 1'800'000'000'000;

// The journal of a bind that failed at its first gate and was rolled back, with known times.
std::vector<json> failed_bind_records(const Plan& plan, const std::string& id) {
  std::vector<json> recs;
  recs.push_back(json{{"event", "bind.begin"}, {"bind_id", id}, {"kind", "bind"}, {"manifest_sha256", "abc"}, {"t", T0}});
  long long t = T0;
  for (const auto& s : plan.steps) {
    recs.push_back({{"event", "step.begin"}, {"bind_id", id}, {"index", s.index}, {"node", s.node}, {"action", s.id()},
                    {"op_id", id + "-" + std::to_string(s.index)}, {"t", t += 100}});
    if (s.id() == "gate.health") {
      recs.push_back({{"event", "step.failed"}, {"bind_id", id}, {"index", s.index}, {"error", "gate health failed: HTTP 503"}, {"t", t += 50}});
      break;
    }
    json ev = json::object();
    if (s.action == Action::deadman_arm) ev = {{"deadman", {{"armed", true}, {"seconds_left", 4200.0}, {"backend", "agent"}}}};
    if (s.action == Action::serve_wait)
      ev = {{"startup", {{"n0", {{"started_at_ms", t}, {"total_ms", 900},
                                 {"phases", json::array({{{"phase", "weights_loaded"}, {"status", "done"}, {"ms", 600}, {"at_ms", t + 600}},
                                                         {{"phase", "graphs_captured"}, {"status", "n/a"}, {"detail", "CPU device"}},
                                                         {{"phase", "ready"}, {"status", "done"}, {"ms", 300}, {"at_ms", t + 900}}})}}}}}};
    recs.push_back({{"event", "step.done"}, {"bind_id", id}, {"index", s.index}, {"evidence", ev}, {"t", t += 1000}});
  }
  recs.push_back({{"event", "rollback.begin"}, {"bind_id", id}, {"reason", "gate failed"}, {"t", t += 10}});
  for (const auto& key : std::vector<std::string>{"stop-rank:n0", "undo:" + id + "-n0-stop", "disarm:n0"}) {
    recs.push_back({{"event", "rollback.task.begin"}, {"bind_id", id}, {"key", key}, {"node", "n0"}, {"t", t += 10}});
    recs.push_back({{"event", "rollback.task.done"}, {"bind_id", id}, {"key", key}, {"note", "ok"}, {"t", t += 200}});
  }
  recs.push_back({{"event", "report.written"}, {"bind_id", id}, {"path", "/nonexistent/" + id + ".md"}, {"t", t += 5}});
  recs.push_back({{"event", "bind.end"}, {"bind_id", id}, {"result", "rolled_back"}, {"t", t += 5}});
  return recs;
}

struct Fixture {
  Manifest m;
  Plan plan;
  std::map<std::string, AgentClient> agents;
  std::FILE* sink = std::tmpfile();
  Progress progress{Progress::Mode::quiet, sink, {}, 0};
  Fixture() {
    auto r = load_manifest_text(kManifest, "rep.yaml");
    INFO(format_diagnostics(r.errors));
    REQUIRE(r.manifest);
    m = *r.manifest;
    plan = make_plan(m);
  }
  ~Fixture() { std::fclose(sink); }

  // build_report of the failed bind of failed_bind_records, folded as the runner folds it.
  json failed_report(const std::string& id) {
    auto journal = BindJournal::open((std::filesystem::temp_directory_path() / ("tandem-rep-" + id + "-" + std::to_string(::getpid()))).string());
    REQUIRE(journal);
    BindRun run;
    for (const auto& r : failed_bind_records(plan, id)) fold(run, r);
    BindContext ctx{m, "", plan, agents, *journal, run, progress, "/nonexistent", false, {}, {}, nullptr};
    json report = build_report(ctx, "rolled_back", 0);
    std::filesystem::remove_all(journal->dir());
    return report;
  }
};

}  // namespace

TEST_CASE("report model: step times, what the rollback undid, dead-man times, engine start-up phases") {
  Fixture f;
  const json report = f.failed_report("b1");

  CHECK(report["failed_step"]["action"] == "gate.health");
  for (const auto& s : report["steps"]) {
    INFO(s.dump());
    if (s["status"] == "not run") {
      CHECK_FALSE(s.contains("started_ms"));
      continue;
    }
    CHECK(s["started_ms"].get<long long>() >= T0);
    CHECK(s["ended_ms"].get<long long>() - s["started_ms"].get<long long>() == s["ms"].get<long long>());
    // What the rollback reversed is marked; what it never touches is not.
    const std::string a = s["action"];
    if (a == "engine.start" || a == "deadman.arm" || a == "stop.verify") CHECK(s.contains("undone_by"));
    if (a == "preflight" || a == "serve.wait") CHECK_FALSE(s.contains("undone_by"));
  }
  CHECK(report["deadman"]["n0"]["backend"] == "agent");
  const long long armed = report["deadman"]["n0"]["armed_ms"];
  CHECK(report["deadman"]["n0"]["deadline_ms"] == armed + 4200 * 1000);
  CHECK(report["deadman"]["n0"]["disarmed_by"] == "rollback");
  CHECK(report["engine_startup"]["n0"]["phases"].size() == 3);
  // Rollback tasks in the order they ran, each with its node.
  std::vector<std::string> tasks;
  for (const auto& t : report["rollback"]["tasks"]) {
    tasks.push_back(t["task"]);
    CHECK(t["node"] == "n0");
  }
  CHECK(tasks == std::vector<std::string>{"stop-rank:n0", "undo:b1-n0-stop", "disarm:n0"});
}

TEST_CASE("report page: self-contained, and every timeline bar is a JSON step with its times and status") {
  Fixture f;
  json report = f.failed_report("b2");
  // Hostile text in evidence stays text.
  report["steps"][0]["result"] = "<script>alert(1)</script>";
  const std::string html = render_report_html(report, "");
  CHECK(html.starts_with("<!DOCTYPE html>"));
  CHECK(html.find("default-src 'none'") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("&lt;script&gt;") != std::string::npos);
  for (const char* external : {"src=\"http", "href=\"http", "url(", "@import"}) CHECK(html.find(external) == std::string::npos);

  CHECK(reporttest::timeline_matches(html, report) == "");
  CHECK(reporttest::timeline_bars(html).size() >= 10);  // preflight .. serve.wait, and the failed gate
  CHECK(html.find("data-task=\"disarm:n0\"") != std::string::npos);   // the rollback's own row
  CHECK(html.find("class=\"deadman\" data-node=\"n0\"") != std::string::npos);
  CHECK(html.find("data-phase=\"weights_loaded\" data-ms=\"600\"") != std::string::npos);
}

TEST_CASE("history: runs with result, duration, failed step; unfinished runs say so") {
  Fixture f;
  auto recs = failed_bind_records(f.plan, "b3");
  recs.push_back({{"event", "bind.begin"}, {"bind_id", "b4"}, {"kind", "bind"}, {"t", T0 + 900000}});
  recs.push_back({{"event", "step.begin"}, {"bind_id", "b4"}, {"index", 1}, {"node", "n0"}, {"action", "preflight"}, {"t", T0 + 900001}});
  auto runs = runs_of(recs, "rep", "/nonexistent/reports");
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].bind_id == "b3");
  CHECK(runs[0].result == "rolled_back");
  CHECK(runs[0].ended_ms > runs[0].started_ms);
  CHECK(runs[0].failed_step["action"] == "gate.health");
  CHECK(runs[0].failed_step["node"] == "controller");
  CHECK(runs[0].report_html.empty());  // no such file
  CHECK(runs[1].result == "unfinished");
  CHECK(runs[1].failed_step.is_null());
  CHECK(runs[1].to_json()["duration_ms"] == 0);
  CHECK(valid_bind_id("b20261202T163500Z-3fa9"));
  for (const auto& bad : std::vector<std::string>{"", "../x", "b1/../../etc", "a b", std::string(65, 'a')}) CHECK_FALSE(valid_bind_id(bad));
}

TEST_CASE("report: a dead-man whose arm and disarm both failed (agent down) still makes a report") {
  Fixture f;
  const std::vector<json> recs{
      {{"event", "bind.begin"}, {"bind_id", "b5"}, {"kind", "bind"}, {"t", T0}},
      {{"event", "step.begin"}, {"bind_id", "b5"}, {"index", 1}, {"node", "n0"}, {"action", "preflight"}, {"t", T0 + 1}},
      {{"event", "step.done"}, {"bind_id", "b5"}, {"index", 1}, {"evidence", nullptr}, {"t", T0 + 2}},
      {{"event", "step.begin"}, {"bind_id", "b5"}, {"index", 2}, {"node", "n0"}, {"action", "deadman.arm"}, {"t", T0 + 3}},
      {{"event", "step.failed"}, {"bind_id", "b5"}, {"index", 2}, {"error", "connection refused"}, {"evidence", nullptr}, {"t", T0 + 4}},
      {{"event", "rollback.begin"}, {"bind_id", "b5"}, {"reason", "arm failed"}, {"t", T0 + 5}},
      {{"event", "rollback.task.begin"}, {"bind_id", "b5"}, {"key", "disarm:n0"}, {"node", "n0"}, {"t", T0 + 6}},
      {{"event", "rollback.task.failed"}, {"bind_id", "b5"}, {"key", "disarm:n0"}, {"error", "connection refused"}, {"t", T0 + 7}}};
  auto journal = BindJournal::open((std::filesystem::temp_directory_path() / ("tandem-rep-b5-" + std::to_string(::getpid()))).string());
  REQUIRE(journal);
  BindRun run;
  for (const auto& r : recs) fold(run, r);
  BindContext ctx{f.m, "", f.plan, f.agents, *journal, run, f.progress, "/nonexistent", false, {}, {}, nullptr};
  const json report = build_report(ctx, "rollback_failed", 0);
  std::filesystem::remove_all(journal->dir());
  CHECK(report["deadman"].empty());  // nothing armed, so no times to show
  CHECK(render_report_markdown(report).find("## Dead-man") == std::string::npos);
  CHECK(reporttest::timeline_matches(render_report_html(report, ""), report) == "");
}
