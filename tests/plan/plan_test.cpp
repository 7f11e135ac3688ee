// Plan ordering: the exact steps `bind` runs, in the order that keeps a bind safe (dead-man armed
// before the outage, hashes compared before launch, workers before the head, disarm last).
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "tandem/manifest.hpp"

using namespace tandem;

namespace {

Manifest load_file(const std::string& rel) {
  auto r = load_manifest_file(std::string(TANDEM_SOURCE_DIR) + "/" + rel);
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  return *r.manifest;
}

Manifest load_text(const std::string& text) {
  auto r = load_manifest_text(text, "three.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  return *r.manifest;
}

// Three nodes, the head listed between its two workers, so "manifest order" and "head last" differ.
const char* kThree = R"(apiVersion: tandem/v1
kind: Bind
metadata: {name: three}
nodes:
  - {name: wa, address: 10.0.0.11, role: worker}
  - {name: boss, address: 10.0.0.10, role: head}
  - {name: wb, address: 10.0.0.12, role: worker}
fabric: {interface: bond0, subnet: 10.0.0.0/24}
engine:
  binary: /opt/tandem/bin/tandem-serve
  model_dir: /models/target
  run_user: svc
  cache_dir: /home/svc/.cache/tandem
  serve:
    port: 8888
    tensor_parallel_size: 3
    gpu_memory_utilization: 0.8512345
    block_size: 64
    kv_cache_memory: 1500MiB
    enable_auto_tool_choice: true
    tool_call_parser: glm45
    speculative_config: {method: dflash, model: /models/draft, num_speculative_tokens: 3}
    default_chat_template_kwargs: {enable_thinking: true, budget: 512, style: "terse"}
    device: cpu
  rendezvous: {port: 29600, timeout: 1m30s500ms}
deadman: {delay: 2h}
rollback:
  commands: [{on: worker, run: [/opt/restore.sh]}, {on: head, run: [/opt/restore.sh, --head]}]
  verify: {url: "http://10.0.0.10:8888/health"}
)";

// Positions of steps matching `pred`, in plan order.
std::vector<size_t> where(const Plan& p, const std::function<bool(const Step&)>& pred) {
  std::vector<size_t> out;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (pred(p.steps[i])) out.push_back(i);
  return out;
}

size_t only(const Plan& p, const std::string& node, const std::string& action) {
  auto at = where(p, [&](const Step& s) { return s.node == node && s.id() == action; });
  INFO(node << " " << action);
  REQUIRE(at.size() == 1);
  return at[0];
}

bool contains(const std::vector<std::string>& argv, const std::string& item) {
  return std::find(argv.begin(), argv.end(), item) != argv.end();
}

// The value after `flag` in argv, or "<absent>".
std::string after(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  if (it == argv.end() || it + 1 == argv.end()) return "<absent>";
  return *(it + 1);
}

}  // namespace

TEST_CASE("seed bind: the worker (spark2) engine starts before the head (spark1)") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  auto starts = where(p, [](const Step& s) { return s.action == Action::engine_start; });
  REQUIRE(starts.size() == 2);
  CHECK(p.steps[starts[0]].node == "spark2");
  CHECK(p.steps[starts[1]].node == "spark1");
}

TEST_CASE("seed bind: the worker's wait_ready precedes the head's engine.start") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  size_t worker_start = only(p, "spark2", "engine.start");
  size_t ready = only(p, "spark2", "engine.wait_ready");
  size_t head_start = only(p, "spark1", "engine.start");
  size_t rendezvous = only(p, "spark1", "engine.rendezvous");
  CHECK(worker_start < ready);
  CHECK(ready < head_start);
  CHECK(head_start < rendezvous);
  CHECK(where(p, [](const Step& s) { return s.action == Action::engine_wait_ready && s.node == "spark1"; }).empty());
}

TEST_CASE("seed bind: every node's dead-man is armed before any outage step and disarmed only after every gate") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  size_t arm = std::max(only(p, "spark1", "deadman.arm"), only(p, "spark2", "deadman.arm"));
  size_t disarm = std::min(only(p, "spark1", "deadman.disarm"), only(p, "spark2", "deadman.disarm"));
  CHECK(only(p, "spark2", "deadman.arm") < only(p, "spark1", "deadman.arm"));  // workers first
  auto outage = where(p, [](const Step& s) { return s.phase == "outage"; });
  auto gates = where(p, [](const Step& s) { return s.phase == "gates"; });
  REQUIRE_FALSE(outage.empty());
  // The seed's gates: health, models, chat, tool_call, json, long retrieval, spec metrics, bench.
  CHECK(gates.size() == 8);
  for (size_t o : outage) CHECK(arm < o);
  for (size_t g : gates) CHECK(g < disarm);
  CHECK(only(p, "spark1", "serve.wait") < disarm);
  // Nothing but the other disarm and the report follow the first disarm.
  CHECK(disarm + 3 == p.steps.size());
  CHECK(p.steps.back().action == Action::report_write);
  // Every preflight precedes the arming: a node that cannot be reached must not cause an outage.
  for (size_t pf : where(p, [](const Step& s) { return s.phase == "preflight"; }))
    CHECK(pf < std::min(only(p, "spark1", "deadman.arm"), only(p, "spark2", "deadman.arm")));
}

TEST_CASE("seed bind: hygiene on every node precedes hashes.compare, which precedes any engine.start") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  size_t compare = only(p, "controller", "hashes.compare");
  for (const char* node : {"spark1", "spark2"}) {
    for (const char* action : {"hygiene.shm", "hygiene.page_cache", "hygiene.cache_dir", "hygiene.sha256"}) {
      INFO(node << " " << action);
      CHECK(only(p, node, action) < compare);
    }
    // The seed's outage: cron, the docker compose stop, the dark-port check, on both nodes.
    CHECK(only(p, node, "hygiene.cron") < compare);
    CHECK(only(p, node, "stop.command") < only(p, node, "stop.verify"));
  }
  for (size_t h : where(p, [](const Step& s) { return s.phase == "hygiene"; })) CHECK(h < compare);
  for (size_t s : where(p, [](const Step& st) { return st.action == Action::engine_start; })) CHECK(compare < s);
}

TEST_CASE("seed bind: step indexes are 1..N with no gaps, on the bind and on the failure path") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  REQUIRE_FALSE(p.steps.empty());
  for (size_t i = 0; i < p.steps.size(); ++i) CHECK(p.steps[i].index == static_cast<int>(i + 1));
  REQUIRE_FALSE(p.on_failure.empty());
  for (size_t i = 0; i < p.on_failure.size(); ++i) CHECK(p.on_failure[i].index == static_cast<int>(i + 1));
  // The failure path ends by verifying the rollback lane at the manifest's URL.
  CHECK(p.on_failure.back().action == Action::rollback_verify);
  CHECK(p.on_failure.back().summary.find("http://10.0.0.1:8888/v1/models") != std::string::npos);
}

TEST_CASE("seed bind: the worker runs headless as rank 1, its health port on its fabric address; the head is rank 0 at the fabric address") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  const auto& worker = p.steps[only(p, "spark2", "engine.start")].argv;
  const auto& head = p.steps[only(p, "spark1", "engine.start")].argv;
  REQUIRE(worker.size() > 2);
  CHECK(worker[0] == "/opt/tandem/bin/tandem-serve");
  CHECK(worker[1] == "/models/glm53-target");
  CHECK(contains(worker, "--headless"));
  CHECK(after(worker, "--node-rank") == "1");
  CHECK(after(worker, "--port") == "8888");          // GET /health only
  CHECK(after(worker, "--host") == "10.0.0.2");      // spark2's fabric address
  CHECK_FALSE(contains(worker, "--served-model-name"));
  CHECK(after(worker, "--master-addr") == "10.0.0.1");
  CHECK(after(worker, "--master-port") == "29521");

  CHECK(after(head, "--node-rank") == "0");
  CHECK(after(head, "--master-addr") == "10.0.0.1");
  CHECK(after(head, "--master-port") == "29521");
  CHECK(after(head, "--port") == "8888");
  CHECK(after(head, "--nnodes") == "2");
  CHECK_FALSE(contains(head, "--headless"));
  // The same recipe on both ranks.
  for (const auto* argv : {&worker, &head}) {
    CHECK(after(*argv, "--tensor-parallel-size") == "2");
    CHECK(after(*argv, "--kv-cache-dtype") == "fp8_e4m3");
    CHECK(after(*argv, "--kv-cache-memory") == "3221225472");
    CHECK(after(*argv, "--speculative-config") ==
          R"({"method":"dflash","model":"/models/dflash2-draft","num_speculative_tokens":7})");
  }
}

TEST_CASE("three nodes: both workers start before the head, in manifest order, as ranks 1 and 2") {
  Plan p = make_plan(load_text(kThree));
  auto starts = where(p, [](const Step& s) { return s.action == Action::engine_start; });
  REQUIRE(starts.size() == 3);
  CHECK(p.steps[starts[0]].node == "wa");
  CHECK(p.steps[starts[1]].node == "wb");
  CHECK(p.steps[starts[2]].node == "boss");
  CHECK(only(p, "wa", "engine.wait_ready") < starts[1]);
  CHECK(only(p, "wb", "engine.wait_ready") < starts[2]);
  CHECK(after(p.steps[starts[0]].argv, "--node-rank") == "1");
  CHECK(after(p.steps[starts[1]].argv, "--node-rank") == "2");
  CHECK(after(p.steps[starts[2]].argv, "--node-rank") == "0");
  for (size_t s : starts) CHECK(after(p.steps[s].argv, "--master-addr") == "10.0.0.10");
  // Preflight and hygiene follow the same order: workers first, head last.
  auto pre = where(p, [](const Step& s) { return s.phase == "preflight"; });
  REQUIRE(pre.size() == 3);
  CHECK(p.steps[pre[0]].node == "wa");
  CHECK(p.steps[pre[1]].node == "wb");
  CHECK(p.steps[pre[2]].node == "boss");
  // The rollback lane runs on the selected nodes, head first (reverse start order).
  std::vector<std::string> rb;
  for (const auto& s : p.on_failure)
    if (s.action == Action::rollback_command) rb.push_back(s.node + ":" + s.argv.back());
  CHECK(rb == std::vector<std::string>{"boss:--head", "wb:/opt/restore.sh", "wa:/opt/restore.sh"});
}

TEST_CASE("plan_to_json carries the same steps as the plan") {
  for (const std::string& text : {std::string(), std::string(kThree)}) {
    Plan p = text.empty() ? make_plan(load_file("manifests/two-spark-dflash.yaml")) : make_plan(load_text(text));
    auto j = plan_to_json(p);
    CHECK(j["name"] == p.name);
    CHECK(j["manifest"] == p.file);
    REQUIRE(j["steps"].size() == p.steps.size());
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const auto& js = j["steps"][i];
      const Step& s = p.steps[i];
      INFO("step " << s.index << " " << s.id());
      CHECK(js["index"] == s.index);
      CHECK(js["phase"] == s.phase);
      CHECK(js["node"] == s.node);
      CHECK(js["action"] == s.id());
      CHECK(js["summary"] == s.summary);
      CHECK(js["argv"].get<std::vector<std::string>>() == s.argv);
      CHECK(js["undo"] == s.undo);
      CHECK(js["details"].size() == s.details.size());
      for (const auto& [k, v] : s.details) CHECK(js["details"][k] == v);
    }
    REQUIRE(j["on_failure"].size() == p.on_failure.size());
    for (size_t i = 0; i < p.on_failure.size(); ++i) CHECK(j["on_failure"][i]["action"] == p.on_failure[i].id());
  }
}

TEST_CASE("the text rendering names every step") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  std::string text = render_plan_text(p);
  for (const auto& s : p.steps) {
    INFO(s.index << " " << s.id());
    CHECK(text.find("action: " + s.id()) != std::string::npos);
    CHECK(text.find(s.summary) != std::string::npos);
  }
}

TEST_CASE("seed bind: stage runs on the worker only, after every dead-man is armed and before the outage") {
  Plan p = make_plan(load_file("manifests/two-spark-dflash.yaml"));
  auto stages = where(p, [](const Step& s) { return s.action == Action::stage_files; });
  REQUIRE(stages.size() == 1);
  const Step& st = p.steps[stages[0]];
  CHECK(st.node == "spark2");
  CHECK(st.phase == "stage");
  CHECK(std::max(only(p, "spark1", "deadman.arm"), only(p, "spark2", "deadman.arm")) < stages[0]);
  for (size_t o : where(p, [](const Step& s) { return s.phase == "outage" || s.phase == "hygiene"; }))
    CHECK(stages[0] < o);
  CHECK_FALSE(st.undo.empty());
  std::string files;
  for (const auto& [k, v] : st.details)
    if (k == "files") files = v;
  // The two config pins live in the model and drafter dirs: they travel with them, not twice.
  CHECK(files == "/opt/tandem/bin/tandem-serve, /opt/glm53/chat-template-mm.jinja, /models/glm53-target/*, /models/dflash2-draft/*");
}

TEST_CASE("stage from the controller: every node, the head too, is checked and staged, workers first") {
  Manifest m = load_file("manifests/two-spark-dflash.yaml");
  m.stage->from = Stage::From::controller;
  Plan p = make_plan(m);
  auto stages = where(p, [](const Step& s) { return s.action == Action::stage_files; });
  auto checks = where(p, [](const Step& s) { return s.action == Action::stage_check; });
  REQUIRE(stages.size() == 2);
  REQUIRE(checks.size() == 2);
  CHECK(p.steps[stages[0]].node == "spark2");
  CHECK(p.steps[stages[1]].node == "spark1");
  CHECK(p.steps[stages[1]].summary.find("equal to the controller's") != std::string::npos);
  for (const auto& [k, v] : p.steps[stages[1]].details)
    if (k == "source") CHECK(v.find("--stage-root") != std::string::npos);
}
