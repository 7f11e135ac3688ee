// gates.custom: the operator's own HTTP and command gates are read and validated like every other
// key (types, unknown keys with a hint, positions), and the plan lists them after the built-ins.
#include <doctest/doctest.h>

#include <string>

#include "tandem/manifest.hpp"

using namespace tandem;

namespace {

// Line numbers in the expectations below refer to this text: the first gate is on line 26.
const std::string kBase = R"(apiVersion: tandem/v1
kind: Bind
metadata: {name: t}
nodes:
  - {name: head1, address: 10.0.0.1, role: head}
  - {name: work1, address: 10.0.0.2, role: worker}
engine:
  binary: /opt/tandem/bin/tandem-serve
  model_dir: /models/target
  run_user: svc
  cache_dir: /home/svc/.cache/tandem
  serve:
    port: 8888
    tensor_parallel_size: 2
    enable_auto_tool_choice: true
    tool_call_parser: glm47
  rendezvous: {port: 29521, timeout: 2m}
deadman: {delay: 70m}
rollback:
  commands:
    - on: head
      run: [/opt/restore.sh]
  verify: {url: 'http://10.0.0.1:8888/health'}
gates:
  custom:
)";

LoadResult with_gates(const std::string& gates) { return load_manifest_text(kBase + gates, "m.yaml"); }

std::string errors_of(const std::string& gates) {
  auto r = with_gates(gates);
  CHECK_FALSE(r.manifest.has_value());
  return format_diagnostics(r.errors);
}

}  // namespace

TEST_CASE("an HTTP gate and a command gate are read with every field") {
  auto r = with_gates(R"(    - name: final-route
      http:
        method: POST
        url: /v1/chat/completions
        body: '{"model": "m", "messages": [{"role": "user", "content": "ping"}]}'
        expect_status: 200
        expect_body_contains: FINAL_ROUTE_OK
        expect_json: {path: /choices/0/finish_reason, equals: stop}
        timeout: 90s
    - name: gpus_visible
      command:
        on: work1
        run: [/usr/bin/nvidia-smi, -L]
        expect_exit: 0
        expect_output_contains: "GPU 0"
        timeout: 20s
    - name: elsewhere
      http: {url: 'http://10.0.0.9:8080/ready', expect_json: {path: /ok, equals: true}}
)");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  const auto& g = r.manifest->gates.custom;
  REQUIRE(g.size() == 3);
  CHECK(g[0].name == "final-route");
  CHECK(g[0].kind == CustomGate::Kind::http);
  CHECK(g[0].method == "POST");
  CHECK(g[0].url == "/v1/chat/completions");
  CHECK(g[0].body.find("\"ping\"") != std::string::npos);
  CHECK(g[0].expect_body_contains == "FINAL_ROUTE_OK");
  CHECK(g[0].expect_json_path == "/choices/0/finish_reason");
  CHECK(g[0].expect_json_equals == std::optional<std::string>("\"stop\""));
  CHECK(g[0].timeout == std::chrono::seconds(90));
  CHECK(g[1].kind == CustomGate::Kind::command);
  CHECK(g[1].command.on == "work1");
  CHECK(g[1].command.run == std::vector<std::string>{"/usr/bin/nvidia-smi", "-L"});
  CHECK(g[1].expect_output_contains == "GPU 0");
  CHECK(g[1].command.timeout == std::chrono::seconds(20));
  CHECK(g[1].timeout == std::chrono::seconds(20));
  CHECK(g[2].method == "GET");
  CHECK(g[2].expect_status == 200);
  CHECK(g[2].expect_json_equals == std::optional<std::string>("true"));
}

TEST_CASE("custom gates: unknown keys, wrong types and both kinds at once are refused where they are") {
  CHECK(errors_of("    - name: a\n      http: {url: /x, expect_stauts: 201}\n") ==
        "m.yaml:27:23: unknown key 'expect_stauts' in 'gates.custom[0].http'; did you mean 'expect_status'? (expected one of: "
        "body, expect_body_contains, expect_json, expect_status, method, timeout, url)\n");
  CHECK(errors_of("    - name: a\n      http: {url: /x, method: FETCH}\n") ==
        "m.yaml:27:31: 'gates.custom[0].http.method' is 'FETCH'; expected one of: GET, POST, PUT, HEAD\n");
  CHECK(errors_of("    - name: a\n      http: {url: /x, expect_status: 700}\n") ==
        "m.yaml:27:38: 'gates.custom[0].http.expect_status' is 700; expected 100 to 599\n");
  CHECK(errors_of("    - name: a\n      http: {url: 'https://10.0.0.1/x'}\n").find(
            "m.yaml:27:19: 'gates.custom[0].http.url' is 'https://10.0.0.1/x': https is not supported") == 0);
  CHECK(errors_of("    - name: a\n      http: {url: /x, expect_json: {path: 'choices.0', equals: 1}}\n") ==
        "m.yaml:27:43: 'gates.custom[0].http.expect_json.path' is 'choices.0', not a JSON Pointer; expected one like "
        "/choices/0/message/content\n");
  CHECK(errors_of("    - name: a\n      http: {url: /x}\n      command: {run: [/bin/true]}\n") ==
        "m.yaml:26:7: 'gates.custom[0]' must have exactly one of 'http' (a request to check) or 'command' (an argv an agent "
        "runs), got both\n");
  CHECK(errors_of("    - name: a\n      command: {run: [bin/true]}\n").find("m.yaml:27:23: ") == 0);  // argv[0] not absolute
  CHECK(errors_of("    - name: a\n      command: {run: [/bin/true], expect_exit: -1}\n").find(
            "m.yaml:27:48: 'gates.custom[0].command.expect_exit' is -1") == 0);
  CHECK(errors_of("    - name: a\n      command: {run: [/bin/true], exit: 0}\n") == std::string(
            "m.yaml:27:35: unknown key 'exit' in 'gates.custom[0].command' (expected one of: expect_exit, expect_output_contains, on, run, timeout)\n"));
}

TEST_CASE("custom gates: names are checked and unique, and a command runs on a node that exists") {
  CHECK(errors_of("    - name: Bad.Name\n      http: {url: /x}\n") ==
        "m.yaml:26:13: 'gates.custom[0].name' is 'Bad.Name'; expected 1 to 63 of a-z, 0-9, '-' and '_' (it becomes the step "
        "gate.custom.<name>)\n");
  CHECK(errors_of("    - name: a\n      http: {url: /x}\n    - name: a\n      http: {url: /y}\n") ==
        "m.yaml:28:7: custom gate name 'a' is used twice; expected each gates.custom[].name once\n");
  CHECK(errors_of("    - name: a\n      command: {on: rank7, run: [/bin/true]}\n") ==
        "m.yaml:27:16: command runs on 'rank7', which is not a node; expected all, head, worker or a node name\n");
  CHECK(errors_of("    - http: {url: /x}\n") == "m.yaml:26:7: missing required key 'gates.custom[0].name'\n");
  CHECK(errors_of("    {name: a}\n").find("m.yaml:26:") == 0);
}
