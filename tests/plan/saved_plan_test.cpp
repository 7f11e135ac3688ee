// Saved plans: what `tandemctl plan --out` writes reads back, still holds for the same manifest,
// and is refused (naming each change) once the manifest, a node or a pin changed; custom gates
// come after the built-in gates in the plan.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "plan/plan.hpp"
#include "plan/saved_plan.hpp"
#include "tandem/manifest.hpp"

using namespace tandem;

namespace {

const std::string kBase = R"(apiVersion: tandem/v1
kind: Bind
metadata: {name: sp}
nodes:
  - {name: head1, address: 10.0.0.1, role: head}
  - {name: work1, address: 10.0.0.2, role: worker}
engine:
  binary: /opt/tandem/bin/tandem-serve
  model_dir: /models/target
  run_user: svc
  cache_dir: /home/svc/.cache/tandem
  pins:
    - {path: /models/target/config.json, sha256: 1111111111111111111111111111111111111111111111111111111111111111}
  serve: {port: 8888, tensor_parallel_size: 2, enable_auto_tool_choice: true, tool_call_parser: glm47}
  rendezvous: {port: 29521, timeout: 2m}
gates:
  custom:
    - {name: route, http: {url: /v1/models, expect_body_contains: target}}
    - {name: nvsmi, command: {on: head, run: [/usr/bin/nvidia-smi, -L], expect_output_contains: GPU}}
deadman: {delay: 70m}
rollback:
  commands: [{on: head, run: [/opt/restore.sh]}]
  verify: {url: 'http://10.0.0.1:8888/health'}
)";

Manifest load(const std::string& text) {
  auto r = load_manifest_text(text, "sp.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  return *r.manifest;
}

std::string edit(std::string s, const std::string& from, const std::string& to) {
  auto at = s.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "test bug: '" << from << "' not in the manifest");
  return s.replace(at, from.size(), to);
}

SavedPlan saved_from(const std::string& text, const std::string& sha) {
  const Manifest m = load(text);
  const std::string file = saved_plan_json(m, "/etc/tandem/sp.yaml", sha, make_plan(m), "2026-12-06T04:00:00Z").dump(2);
  REQUIRE(is_saved_plan(file));
  auto p = parse_saved_plan(file, "plan.json");
  REQUIRE_MESSAGE(p, (p ? "" : p.error().message));
  return *p;
}

std::vector<std::string> changes(const SavedPlan& s, const std::string& text, const std::string& sha) {
  const Manifest m = load(text);
  return saved_plan_changes(s, m, sha, make_plan(m));
}

}  // namespace

TEST_CASE("custom gates are plan steps after the built-in gates, with their argv") {
  const Plan p = make_plan(load(kBase));
  std::vector<std::string> gates;
  const Step* nvsmi = nullptr;
  for (const auto& s : p.steps)
    if (s.action == Action::gate) {
      gates.push_back(s.id());
      if (s.id() == "gate.custom.nvsmi") nvsmi = &s;
    }
  CHECK(gates == std::vector<std::string>{"gate.health", "gate.models", "gate.chat", "gate.tool_call", "gate.json",
                                          "gate.custom.route", "gate.custom.nvsmi"});
  REQUIRE(nvsmi);
  CHECK(nvsmi->argv == std::vector<std::string>{"/usr/bin/nvidia-smi", "-L"});
  CHECK(nvsmi->summary.find("on head") == 0);
}

TEST_CASE("a saved plan holds for the manifest it was made from") {
  const SavedPlan s = saved_from(kBase, "aaaa");
  CHECK(s.manifest_path == "/etc/tandem/sp.yaml");
  CHECK(changes(s, kBase, "aaaa").empty());
}

TEST_CASE("a saved plan is refused once the manifest, a node or a pin changed, naming each") {
  const SavedPlan s = saved_from(kBase, "aaaa");
  // A node's address: the node, the field, both values; and the digest.
  auto c = changes(s, edit(kBase, "address: 10.0.0.2", "address: 10.0.0.3"), "bbbb");
  REQUIRE(c.size() >= 2);
  CHECK(c[0] == "manifest /etc/tandem/sp.yaml: sha256 was aaaa, is now bbbb");
  CHECK(c[1] == "node work1: address was 10.0.0.2, is now 10.0.0.3");
  // A pin's digest.
  c = changes(s, edit(kBase, "sha256: 1111", "sha256: 2222"), "cccc");
  REQUIRE(c.size() == 2);
  CHECK(c[1].starts_with("pin /models/target/config.json: sha256 was 1111"));
  // A gate edited: no node or pin changed, but the steps did (and the digest).
  c = changes(s, edit(kBase, "expect_body_contains: target", "expect_body_contains: other"), "dddd");
  REQUIRE(c.size() == 2);
  CHECK(c[1].find("step ") == 0);
  CHECK(c[1].find("gate.custom.route") != std::string::npos);
  // A node added.
  c = changes(s,
              edit(edit(kBase, "  - {name: work1", "  - {name: work2, address: 10.0.0.5, role: worker}\n  - {name: work1"),
                   "tensor_parallel_size: 2", "tensor_parallel_size: 3"),
              "eeee");
  CHECK(std::find(c.begin(), c.end(), "node work2: added to the manifest") != c.end());
  // Only the digest (a comment): still refused, the digest names it.
  c = changes(s, kBase + "# reviewed\n", "ffff");
  REQUIRE(c.size() == 1);
  CHECK(c[0].find("sha256 was aaaa") != std::string::npos);
}

TEST_CASE("saved plan files that are not what plan --out writes are refused with what is wrong") {
  CHECK_FALSE(is_saved_plan("apiVersion: tandem/v1\n"));
  CHECK_FALSE(is_saved_plan("{\"steps\": []}"));
  auto p = parse_saved_plan("{\"tandem_saved_plan\": 9}", "p.json");
  REQUIRE_FALSE(p);
  CHECK(p.error().message == "p.json: tandem_saved_plan is 9; this tandemctl reads format 1 (make the plan again with this tandemctl)");
  p = parse_saved_plan("{\"tandem_saved_plan\": 1, \"manifest\": {\"path\": \"rel.yaml\", \"sha256\": \"x\"}}", "p.json");
  REQUIRE_FALSE(p);
  CHECK(p.error().message == "p.json: manifest.path 'rel.yaml' is not an absolute path");
  p = parse_saved_plan("{\"tandem_saved_plan\": 1, \"manifest\": {\"path\": \"/m.yaml\", \"sha256\": \"x\"}, \"nodes\": {}}", "p.json");
  REQUIRE_FALSE(p);
  CHECK(p.error().message == "p.json: 'nodes' must be a list");
}

TEST_CASE("a saved plan's actions read back as the enum; an unknown one is named") {
  const Manifest m = load(kBase);
  const Plan plan = make_plan(m);
  for (const auto* list : {&plan.steps, &plan.on_failure})
    for (const Step& s : *list) {
      INFO(s.id());
      auto a = parse_action(s.id());
      REQUIRE(a);
      CHECK(a->action == s.action);
      CHECK(a->gate == s.gate);
    }
  auto j = saved_plan_json(m, "/etc/tandem/sp.yaml", "abc", plan, "2026-12-06T04:00:00Z");
  j["steps"][3]["action"] = "hygiene.defrag";
  auto p = parse_saved_plan(j.dump(), "plan.json");
  REQUIRE_FALSE(p);
  CHECK(p.error().message.starts_with("plan.json: steps[3]: unknown plan action 'hygiene.defrag' (this tandemctl knows: "));
  CHECK(p.error().message.find("gate.<name>") != std::string::npos);
  j["steps"][3]["action"] = 7;
  p = parse_saved_plan(j.dump(), "plan.json");
  REQUIRE_FALSE(p);
  CHECK(p.error().message == "plan.json: steps[3]: expected an object with an 'action' string");
  CHECK_FALSE(parse_action("gate."));  // a gate with no name
}
