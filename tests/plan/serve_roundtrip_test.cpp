// Round trip: the argv the controller builds for each rank parses with tandem-serve's own CLI11
// parser, passes its cross-flag checks, and carries the manifest's values unchanged.
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli/serve_flags.hpp"
#include "tandem/manifest.hpp"
#include "tandem/serve_args.hpp"
#include "tandem/units.hpp"

using namespace tandem;

namespace {

struct Parsed {
  engine::ServeConfig cfg;
  std::string error;  // CLI11's message when parsing failed
};

// Parse argv (argv[0] is the program) the way tandem-serve's main does.
Parsed parse_argv(const std::vector<std::string>& argv) {
  Parsed out;
  CLI::App app{"tandem-serve"};
  engine::add_serve_flags(app, out.cfg);
  // CLI11's parse(vector) consumes from the back: it expects the arguments reversed.
  std::vector<std::string> args(argv.rbegin(), argv.rend());
  args.pop_back();  // drop the program
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    out.error = std::string(e.get_name()) + ": " + e.what();
  }
  return out;
}

Manifest load(const std::string& text_or_file, bool is_file) {
  auto r = is_file ? load_manifest_file(std::string(TANDEM_SOURCE_DIR) + "/" + text_or_file)
                   : load_manifest_text(text_or_file, "t.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  return *r.manifest;
}

void check_round_trip(const Manifest& m) {
  const ServeFlags& s = m.engine.serve;
  for (const Node& n : m.nodes) {
    const bool head = n.role == Role::head;
    auto argv = serve_argv(m, n);
    INFO("node " << n.name << ": " << shell_quote(argv));
    Parsed p = parse_argv(argv);
    REQUIRE(p.error.empty());
    const engine::ServeConfig& c = p.cfg;
    auto problems = engine::check_serve_config(c);
    CHECK(problems.empty());
    for (const auto& e : problems) INFO(e);

    CHECK(c.model == m.engine.model_dir);
    CHECK(c.node_rank == node_rank(m, n));
    CHECK(c.node_rank == (head ? 0 : c.node_rank));
    CHECK(c.nnodes == static_cast<int>(m.nodes.size()));
    CHECK(c.master_addr == m.head().fabric_address);
    CHECK(c.master_port == m.engine.rendezvous.port);
    CHECK(c.headless == !head);
    auto timeout = parse_duration(c.rendezvous_timeout);
    REQUIRE(timeout);
    CHECK(*timeout == m.engine.rendezvous.timeout);
    if (head) {
      CHECK(c.port == s.port);
      CHECK(c.host == s.host);
      CHECK(c.served_model_name == s.served_model_name);
    } else {
      CHECK(c.port == s.port);                      // the worker's GET /health port
      CHECK(c.host == n.fabric_address);            // on its own fabric address
      CHECK(c.served_model_name.empty());           // it serves no model
    }
    CHECK(c.tensor_parallel_size == s.tensor_parallel_size);
    CHECK(c.gpu_memory_utilization == s.gpu_memory_utilization);  // exactly: no digits lost on the way
    if (s.block_size) CHECK(c.block_size == s.block_size);
    if (s.max_model_len) CHECK(c.max_model_len == s.max_model_len);
    if (s.max_num_seqs) CHECK(c.max_num_seqs == s.max_num_seqs);
    if (!s.moe_backend.empty()) CHECK(c.moe_backend == s.moe_backend);
    if (!s.load_format.empty()) CHECK(c.load_format == s.load_format);
    CHECK(c.trust_remote_code == s.trust_remote_code);
    CHECK(c.enforce_eager == s.enforce_eager);
    CHECK(c.kv_cache_dtype == s.kv_cache_dtype);
    if (s.kv_cache_memory) {
      auto bytes = parse_size(c.kv_cache_memory);
      REQUIRE(bytes);
      CHECK(*bytes == *s.kv_cache_memory);
    } else {
      CHECK(c.kv_cache_memory.empty());
    }
    if (s.speculative) {
      auto j = nlohmann::json::parse(c.speculative_config);
      CHECK(j == nlohmann::json{{"method", s.speculative->method},
                                {"model", s.speculative->model},
                                {"num_speculative_tokens", s.speculative->num_speculative_tokens}});
    } else {
      CHECK(c.speculative_config.empty());
    }
    if (s.default_chat_template_kwargs.empty())
      CHECK(c.default_chat_template_kwargs.empty());
    else
      CHECK(nlohmann::json::parse(c.default_chat_template_kwargs) ==
            nlohmann::json::parse(s.default_chat_template_kwargs));
    CHECK(c.chat_template == s.chat_template);
    CHECK(c.tool_call_parser == s.tool_call_parser);
    CHECK(c.enable_auto_tool_choice == s.enable_auto_tool_choice);
    CHECK(c.reasoning_parser == s.reasoning_parser);
    if (!s.distributed_executor_backend.empty())
      CHECK(c.distributed_executor_backend == s.distributed_executor_backend);
    CHECK(c.device == s.device);
  }
}

}  // namespace

TEST_CASE("round trip: the seed bind's argv parses in tandem-serve with the manifest's values") {
  Manifest m = load("manifests/two-spark-dflash.yaml", true);
  check_round_trip(m);
  // Spot-check the values that matter most against the literal recipe.
  Parsed head = parse_argv(serve_argv(m, m.head()));
  CHECK(head.cfg.port == 8888);
  CHECK(head.cfg.block_size == 2304);
  CHECK(head.cfg.kv_cache_memory == "3221225472");
  CHECK(nlohmann::json::parse(head.cfg.default_chat_template_kwargs) == nlohmann::json{{"enable_thinking", false}});
  CHECK(head.cfg.master_addr == "10.0.0.1");
  CHECK(head.cfg.master_port == 29521);
  CHECK_FALSE(head.cfg.headless);
  Parsed worker = parse_argv(serve_argv(m, *m.workers().at(0)));
  CHECK(worker.cfg.node_rank == 1);
  CHECK(worker.cfg.headless);
}

TEST_CASE("round trip: the embedded local manifest") { check_round_trip(load("manifests/local.yaml", true)); }
TEST_CASE("round trip: the local manifest's GPU twin") { check_round_trip(load("manifests/local-cuda.yaml", true)); }

TEST_CASE("round trip: three ranks, a many-digit utilization, a millisecond timeout and a nested kwargs map") {
  Manifest m = load(R"(apiVersion: tandem/v1
kind: Bind
nodes:
  - {name: wa, address: 10.0.0.11, role: worker}
  - {name: boss, address: 10.0.0.10, role: head}
  - {name: wb, address: 10.0.0.12, role: worker}
engine:
  binary: /opt/tandem/bin/tandem-serve
  model_dir: /models/target
  run_user: svc
  cache_dir: /home/svc/.cache/tandem
  serve:
    served_model_name: "my model"
    port: 8888
    tensor_parallel_size: 3
    gpu_memory_utilization: 0.8512345
    block_size: 64
    kv_cache_memory: 1500MiB
    enable_auto_tool_choice: true
    tool_call_parser: glm45
    speculative_config: {method: dflash, model: /models/draft, num_speculative_tokens: 3}
    default_chat_template_kwargs: {enable_thinking: true, budget: 512, style: "it's terse", tags: [a, "1"]}
    device: cpu
  rendezvous: {port: 29600, timeout: 1m30s500ms}
deadman: {delay: 2h}
rollback:
  commands: [{run: [/opt/restore.sh]}]
  verify: {url: "http://10.0.0.10:8888/health"}
)",
                    false);
  check_round_trip(m);
  Parsed wb = parse_argv(serve_argv(m, m.nodes[2]));
  CHECK(wb.cfg.node_rank == 2);
  CHECK(nlohmann::json::parse(wb.cfg.default_chat_template_kwargs) ==
        nlohmann::json::parse(R"({"enable_thinking":true,"budget":512,"style":"it's terse","tags":["a","1"]})"));
}
