// tandemctl bind end to end: the real tandemctl binary drives real tandemd agents over mutual TLS,
// which run the real CPU tandem-serve in sandbox roots. What an operator relies on: a bind runs
// the plan and serves; a failed bind puts the old lane back with crontabs byte for byte and no
// rank left running; a killed controller's bind resumes without redoing steps; a second bind is
// refused while one runs; status, disarm, logs and rollback show and do what they say.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "bind_cluster.hpp"
#include "report_dom.hpp"

using namespace bindtest;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

json last_report(const Cluster& c) {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(c.state / "bindtest/reports"))
    if (e.path().extension() == ".json" && (newest.empty() || fs::last_write_time(e) >= fs::last_write_time(newest)))
      newest = e.path();
  REQUIRE_FALSE(newest.empty());
  return json::parse(slurp(newest));
}

// The report page as a browser renders it: headless Chromium (Debian's package), offline, a fresh
// profile. The page must load without a console message (a CSP violation or a script error would
// be one), and the timeline in the rendered DOM must be the JSON report's steps.
void check_in_chromium(const Cluster& c, const json& report) {
  const fs::path html = report.value("html", std::string());
  REQUIRE(fs::exists(html));
  std::string browser;
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(p)) browser = p;
  if (browser.empty()) {
    MESSAGE("SKIPPED the report page in a browser: chromium is not installed (apt-get install chromium)");
    return;
  }
  const fs::path out = c.dir / "chromium";
  fs::create_directories(out);
  const std::string cmd = "timeout 90 " + browser +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking"
                          " --disable-component-update --disable-sync --user-data-dir=" + (out / "profile").string() +
                          " --enable-logging=stderr --v=0 --dump-dom 'file://" + html.string() + "' > " + (out / "dom.html").string() +
                          " 2> " + (out / "stderr.txt").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string dom = slurp(out / "dom.html"), log = slurp(out / "stderr.txt");
  INFO(log);
  CHECK(log.find(":CONSOLE") == std::string::npos);
  CHECK(dom.find("<svg") != std::string::npos);
  CHECK(reporttest::timeline_matches(dom, report) == "");
  CHECK(reporttest::timeline_bars(dom).size() == report["steps"].size() - 1);  // all but report.write, still running
  CHECK(dom.find("id=\"result\"><span class=\"badge " + report["result"].get<std::string>()) != std::string::npos);
}

json status_json(const Cluster& c) {
  std::string out;
  int rc = c.ctl({"status", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out);
  CHECK(rc == 0);
  return json::parse(out);
}

}  // namespace

TEST_CASE("one-node bind with the real CPU tandem-serve; status, logs; rollback restores the old lane") {
  Cluster c({.nodes = 1});
  c.start_old_lane();
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("bound: 'bindtest' serves at http://127.0.0.1:" + std::to_string(c.serve_port)) != std::string::npos);
  CHECK(port_answers(c.serve_port));  // the new lane
  CHECK(c.stop_count() == 1);
  CHECK(c.crontab(0).find("#tandem-disabled") != std::string::npos);
  CHECK_FALSE(fs::exists(c.root(0) / "dev/shm/tandem-test-1"));

  json report = last_report(c);
  CHECK(report["result"] == "bound");
  for (const auto& s : report["steps"]) CHECK_MESSAGE(s["status"] == "done", s.dump());
  CHECK(report["hashes"]["ok"] == true);
  CHECK(report["hashes"]["files_compared"].get<int>() >= 3);
  CHECK(report["hashes"]["table"].size() == report["hashes"]["files_compared"]);
  // Where the engine's start-up went (tandem-serve's /health), and when the dead-man was armed.
  std::vector<std::string> phases;
  for (const auto& p : report["engine_startup"]["rank0"]["phases"]) phases.push_back(p["phase"]);
  CHECK(phases == std::vector<std::string>{"weights_loaded", "drafter_loaded", "kv_pool_sized", "graphs_captured", "ready"});
  CHECK(report["deadman"]["rank0"]["disarmed_by"] == "bind");
  CHECK(report["deadman"]["rank0"]["disarmed_ms"] > report["deadman"]["rank0"]["armed_ms"]);
  check_in_chromium(c, report);

  // The history lists it; report finds its page.
  rc = c.ctl({"history", "-o", "json"}, out, true);
  REQUIRE(rc == 0);
  json hist = json::parse(out);
  REQUIRE(hist["runs"].size() == 1);
  CHECK(hist["runs"][0]["bind_id"] == report["bind_id"]);
  CHECK(hist["runs"][0]["result"] == "bound");
  CHECK(hist["runs"][0]["report"]["html"] == report["html"]);
  rc = c.ctl({"report", report["bind_id"].get<std::string>()}, out, true);
  CHECK(rc == 0);
  CHECK(out == report["html"].get<std::string>() + "\n");

  json st = status_json(c);
  CHECK(st["nodes"][0]["engine"]["phase"] == "ready");
  CHECK(st["nodes"][0]["deadman"]["armed"] == false);
  CHECK(st["last_bind"]["result"] == "bound");

  rc = c.ctl({"logs", "rank0", c.manifest_path(), "--lines", "5"}, out);
  CHECK(rc == 0);
  CHECK_FALSE(out.empty());
  CHECK(c.ctl({"logs", "rank9", c.manifest_path()}, out) == 1);
  CHECK(out.find("no node 'rank9'") != std::string::npos);

  // Binding again over a live lane stops in preflight, and changes nothing.
  rc = c.ctl({"bind", c.manifest_path()}, out);
  CHECK(rc == 3);
  CHECK(out.find("an engine rank is already running there") != std::string::npos);
  CHECK(out.find("nothing was changed on any node") != std::string::npos);
  CHECK(port_answers(c.serve_port));
  CHECK(status_json(c)["nodes"][0]["engine"]["phase"] == "ready");

  // The operator changes their mind: everything back, the old lane answers, crontab as it was.
  rc = c.ctl({"rollback", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(port_answers(c.serve_port));  // the old lane, started by the rollback command
  st = status_json(c);
  CHECK(st["nodes"][0]["engine"]["phase"] != "ready");
  CHECK(st["last_bind"]["kind"] == "rollback");
  CHECK(st["last_bind"]["result"] == "rolled_back");
}

TEST_CASE("a worker that never becomes ready: rolled back, crontabs byte-identical, no rank left running") {
  Cluster c({.nodes = 2, .hang_worker = true});
  c.start_old_lane();
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 3);
  CHECK(out.find("(engine.wait_ready) on rank1") != std::string::npos);
  CHECK(out.find("rolled back") != std::string::npos);
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(c.crontab(1) == c.expected_crontab());
  CHECK(processes_with("987654").empty());  // the hanging worker was stopped
  CHECK(port_answers(c.serve_port));        // the old lane again
  json report = last_report(c);
  CHECK(report["result"] == "rolled_back");
  CHECK(report["failed_step"]["action"] == "engine.wait_ready");
  CHECK(report["rollback"]["tasks"].size() >= 5);
  // The head never started: a failed worker stops the bind before the head.
  for (const auto& s : report["steps"])
    if (s["action"] == "engine.start" && s["node"] == "rank0") CHECK(s["status"] == "not run");
  json st = status_json(c);
  CHECK(st["nodes"][0]["deadman"]["armed"] == false);
  CHECK(st["nodes"][1]["deadman"]["armed"] == false);
}

TEST_CASE("kill -9 of the controller mid-bind: a second bind is refused meanwhile, the next one resumes") {
  Cluster c({.nodes = 1, .stop_sleep_s = 3});
  c.start_old_lane();
  const pid_t first = c.ctl_background({"bind", c.manifest_path()}, c.dir / "first.log");
  // Wait until the stop command is running (the outage has begun).
  for (int i = 0; i < 300 && c.journal().find("\"action\":\"stop.command\"") == std::string::npos; ++i)
    std::this_thread::sleep_for(50ms);
  REQUIRE(c.journal().find("\"action\":\"stop.command\"") != std::string::npos);

  std::string out;
  int rc = c.ctl({"bind", c.manifest_path()}, out);
  CHECK(rc == 3);
  CHECK(out.find("pid " + std::to_string(first)) != std::string::npos);

  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);

  json st = status_json(c);
  CHECK(st["last_bind"]["result"] == "unfinished");
  CHECK(st["nodes"][0]["deadman"]["armed"] == true);
  CHECK(st["nodes"][0]["deadman"]["seconds_left"].get<long long>() > 500);
  rc = c.ctl({"disarm", c.manifest_path()}, out);
  CHECK(rc == 0);
  CHECK(out.find("rank0: dead-man disarmed") != std::string::npos);
  CHECK(status_json(c)["nodes"][0]["deadman"]["armed"] == false);

  rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("resuming bind") != std::string::npos);
  CHECK(out.find("already done") != std::string::npos);
  CHECK(c.stop_count() == 1);  // the re-sent stop step was replayed, not run again
  CHECK(port_answers(c.serve_port));
  json report = last_report(c);
  CHECK(report["result"] == "bound");
}

TEST_CASE("two-rank bind (TP2 over TCP, worker first): both ranks ready, gates pass; rollback stops both") {
  Cluster c({.nodes = 2, .gates = "on"});
  c.start_old_lane();
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out << slurp(c.dir / "ctl.err"));
  REQUIRE(rc == 0);
  json r = json::parse(out);
  CHECK(r["result"] == "bound");
  CHECK(r["resumed"] == false);
  CHECK(port_answers(c.serve_port));
  json report = last_report(c);
  int worker_ready = 0, head_start = 0;
  for (const auto& s : report["steps"]) {
    CHECK_MESSAGE(s["status"] == "done", s.dump());
    if (s["action"] == "engine.wait_ready" && s["node"] == "rank1") worker_ready = s["index"];
    if (s["action"] == "engine.start" && s["node"] == "rank0") head_start = s["index"];
  }
  CHECK(worker_ready > 0);
  CHECK(head_start > worker_ready);  // the head starts only after the worker is ready
  REQUIRE(report["gates"].size() == 5);  // health, models, chat, tool_call, json: asked of the live TP2 head
  for (const auto& g : report["gates"]) CHECK_MESSAGE(g["evidence"]["passed"] == true, g.dump());
  json st = status_json(c);
  CHECK(st["nodes"][0]["engine"]["phase"] == "ready");
  CHECK(st["nodes"][1]["engine"]["phase"] == "ready");

  rc = c.ctl({"rollback", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(c.crontab(1) == c.expected_crontab());
  CHECK(processes_with((c.root(1) / "models/tiny").string()).empty());  // no orphaned worker rank
  CHECK(port_answers(c.serve_port));                                     // the old lane
}

TEST_CASE("a model file that differs between ranks stops the bind before launch and is named") {
  Cluster c({.nodes = 2});
  c.start_old_lane();
  write(c.root(1) / "models/tiny/generation_config.json", "{\"tampered\": true}\n");
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 3);
  CHECK(out.find("refusing to launch: 1 file differs: /models/tiny/generation_config.json") != std::string::npos);
  json report = last_report(c);
  CHECK(report["failed_step"]["action"] == "hashes.compare");
  CHECK(report["hashes"]["ok"] == false);
  bool named = false;
  for (const auto& s : report["steps"]) {
    if (s["action"] == "engine.start") CHECK(s["status"] == "not run");
    if (s["action"] == "hashes.compare")
      named = s["evidence"]["mismatches"][0]["file"] == "/models/tiny/generation_config.json" &&
              s["evidence"]["mismatches"][0]["digests"].size() == 2;
  }
  CHECK(named);
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(c.crontab(1) == c.expected_crontab());
  CHECK(port_answers(c.serve_port));  // the old lane, restarted after its stop
}

TEST_CASE("rollback --local with an unreachable agent: undoes what this controller applied where it can, names the rest") {
  Cluster c({.nodes = 2});
  c.start_old_lane();
  std::string out;
  const int bound = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);  // the bind's own account, when it fails (it failed once on a machine under triple load)
  REQUIRE(bound == 0);
  ::kill(c.agents[1], SIGKILL);
  ::waitpid(c.agents[1], nullptr, 0);

  int rc = c.ctl({"status", c.manifest_path()}, out);
  CHECK(rc == 3);
  CHECK(out.find("rank1 (worker, 127.0.0.2): agent UNREACHABLE: rank1 (127.0.0.2:" + std::to_string(c.agent_ports[1]) + ")") !=
        std::string::npos);
  CHECK(c.crontab(0).find("#tandem-disabled") != std::string::npos);

  rc = c.ctl({"rollback", c.manifest_path(), "--local"}, out);
  INFO(out);
  CHECK(rc == 3);  // rank1 was left out, and it says so
  CHECK(out.find("skipping rank1: unreachable") != std::string::npos);
  CHECK(out.find("rank1 was unreachable: nothing was undone there by this controller") != std::string::npos);
  CHECK(c.crontab(0) == c.expected_crontab());          // rank0 restored from the controller's journal
  CHECK(c.crontab(1).find("#tandem-disabled") != std::string::npos);  // rank1 untouched
  CHECK(port_answers(c.serve_port));                     // the old lane, started on rank0
}

TEST_CASE("a failing gate rolls the bind back and names the gate") {
  Cluster c({.nodes = 1, .gates = "needle"});
  c.start_old_lane();
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 3);
  CHECK(out.find("(gate.long_retrieval) on controller: gate long_retrieval failed: ") != std::string::npos);
  CHECK(out.find("rolled back") != std::string::npos);
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(port_answers(c.serve_port));  // the old lane
  json report = last_report(c);
  CHECK(report["failed_step"]["action"] == "gate.long_retrieval");
  for (const auto& g : report["gates"])
    CHECK(g["status"] == (g["gate"] == "long_retrieval" ? "failed" : "done"));
}

TEST_CASE("the bench gate's run is charted next to the bind report") {
  Cluster c({.nodes = 1, .gates = "bench"});
  c.start_old_lane();
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path(), "-o", "json"}, out, true);
  INFO(out << slurp(c.dir / "ctl.err"));
  REQUIRE(rc == 0);
  json report = last_report(c);
  const json* bench = nullptr;
  for (const auto& g : report["gates"])
    if (g["gate"] == "bench") bench = &g;
  REQUIRE(bench);
  CHECK((*bench)["status"] == "done");
  REQUIRE(report.contains("bench_svg"));
  const fs::path svg = report["bench_svg"].get<std::string>();
  CHECK(svg.parent_path() == c.state / "bindtest/reports");
  CHECK(svg.filename() == report["bind_id"].get<std::string>() + ".bench.svg");
  const std::string chart = slurp(svg);
  CHECK(chart.starts_with("<svg"));
  for (const auto& fixture : (*bench)["evidence"]["evidence"]["settings"]["fixtures"])
    CHECK_MESSAGE(chart.find(fixture.get<std::string>()) != std::string::npos, fixture);  // one line per fixture
  const fs::path md = svg.parent_path() / (report["bind_id"].get<std::string>() + ".md");
  CHECK(slurp(md).find(svg.filename().string()) != std::string::npos);
  CHECK(c.ctl({"rollback", c.manifest_path()}, out) == 0);
}

TEST_CASE("on a terminal bind asks after preflight; 'n' ends it aborted with nothing changed") {
  if (!fs::exists("/usr/bin/script")) {
    MESSAGE("SKIPPED: util-linux's script (a pty for the prompt) is not installed");
    return;
  }
  Cluster c({.nodes = 1});
  c.start_old_lane();
  // script(1) gives tandemctl a terminal; the answer waits in it until bind asks.
  const fs::path out = c.dir / "prompt.out";
  const std::string cmd = "printf 'n\\n' | script -qec \"" + std::string(TANDEMCTL_BIN) + " bind " + c.manifest_path() +
                          " --state-dir " + c.state.string() + " --pki-dir " + c.pki.string() + "\" /dev/null > " + out.string() + " 2>&1";
  const int st = std::system(cmd.c_str());
  const std::string text = slurp(out);
  INFO(text);
  CHECK(WEXITSTATUS(st) == 3);
  CHECK(text.find("Proceed? [y/N]") != std::string::npos);
  CHECK(text.find("bind aborted at the prompt: nothing was changed on any node") != std::string::npos);
  CHECK(text.find("deadman.arm") == std::string::npos);  // never got that far
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(port_answers(c.serve_port));  // the old lane, untouched
  std::string hist;
  REQUIRE(c.ctl({"history", "-o", "json"}, hist, true) == 0);
  CHECK(json::parse(hist)["runs"][0]["result"] == "aborted");
}

TEST_CASE("custom gates run after the built-in ones: an HTTP check and an agent's command; a failing one rolls back") {
  {
    Cluster c({.nodes = 1, .gates = "custom"});
    c.start_old_lane();
    std::string out;
    int rc = c.ctl({"bind", c.manifest_path()}, out);
    INFO(out);
    REQUIRE(rc == 0);
    json report = last_report(c);
    std::vector<std::string> order;
    for (const auto& g : report["gates"]) {
      order.push_back(g["gate"]);
      CHECK(g["status"] == "done");
    }
    CHECK(order == std::vector<std::string>{"health", "custom.listed", "custom.route"});
    CHECK(report["gates"][2]["evidence"]["evidence"]["rank0"]["output_tail"] == "FINAL_ROUTE_OK\n");
    CHECK(c.ctl({"rollback", c.manifest_path()}, out) == 0);
  }
  Cluster c({.nodes = 1, .gates = "custom_fail"});
  c.start_old_lane();
  std::string out;
  int rc = c.ctl({"bind", c.manifest_path()}, out);
  INFO(out);
  CHECK(rc == 3);
  CHECK(out.find("(gate.custom.route) on controller: gate custom.route failed: rank0: exit 0 but the output lacks "
                 "'FINAL_ROUTE_NOPE': FINAL_ROUTE_OK") != std::string::npos);
  CHECK(out.find("rolled back") != std::string::npos);
  CHECK(c.crontab(0) == c.expected_crontab());
  CHECK(port_answers(c.serve_port));  // the old lane
}
