// The shipped manifests parse into the values their YAML states.
#include <doctest/doctest.h>

#include "tandem/manifest.hpp"

using namespace tandem;
using namespace std::chrono_literals;

static Manifest load_ok(const std::string& rel) {
  auto r = load_manifest_file(std::string(TANDEM_SOURCE_DIR) + "/" + rel);
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.errors.empty());
  REQUIRE(r.manifest);
  return *r.manifest;
}

TEST_CASE("the seed's bind: every flag of the recipe is carried") {
  Manifest m = load_ok("manifests/two-spark-dflash.yaml");
  REQUIRE(m.nodes.size() == 2);
  CHECK(m.head().name == "spark1");
  CHECK(m.head().fabric_address == "10.0.0.1");
  REQUIRE(m.workers().size() == 1);
  CHECK(m.workers()[0]->name == "spark2");
  const ServeFlags& s = m.engine.serve;
  CHECK(s.served_model_name == "glm-5.3-flash");
  CHECK(s.port == 8888);
  CHECK(s.trust_remote_code);
  CHECK(s.load_format == "safetensors");
  CHECK(s.tensor_parallel_size == 2);
  CHECK(s.gpu_memory_utilization == doctest::Approx(0.85));
  CHECK(s.max_model_len == 262144);
  CHECK(s.max_num_seqs == 6);
  CHECK(s.block_size == 2304);
  CHECK(s.moe_backend == "marlin");
  REQUIRE(s.speculative);
  CHECK(s.speculative->method == "dflash");
  CHECK(s.speculative->model == "/models/dflash2-draft");
  CHECK(s.speculative->num_speculative_tokens == 7);
  CHECK(s.kv_cache_dtype == "fp8_e4m3");
  CHECK(s.kv_cache_memory == 3221225472ULL);
  CHECK(s.enforce_eager);
  CHECK(s.chat_template == "/opt/glm53/chat-template-mm.jinja");
  CHECK(s.tool_call_parser == "glm47");
  CHECK(s.enable_auto_tool_choice);
  CHECK(s.reasoning_parser == "glm45");
  CHECK(s.default_chat_template_kwargs == R"({"enable_thinking":false})");
  CHECK(s.distributed_executor_backend == "mp");
  CHECK(m.engine.rendezvous.port == 29521);
  CHECK(m.engine.drafter_dir == "/models/dflash2-draft");
  CHECK(m.hygiene.min_mem_available == 115ULL << 30);
  CHECK(m.hygiene.cron_patterns == std::vector<std::string>{"8888", "inference-watchdog", "restore-sero"});
  CHECK(m.deadman.delay == Duration(70min));
  CHECK(m.deadman.backend == DeadmanBackend::systemd);
  REQUIRE(m.rollback.commands.size() == 1);
  CHECK(m.rollback.commands[0].run ==
        std::vector<std::string>{"/home/funland/glm53-dflash2-canary-20260827/restore-sero.sh", "manual"});
  CHECK(m.gates.long_retrieval_tokens == 98304);
  CHECK(m.gates.long_retrieval_require_needle);
  CHECK(m.gates.spec_metrics);
}

TEST_CASE("the embedded default: two ranks on loopback with sandboxed roots and the CPU back end") {
  Manifest m = load_ok("manifests/local.yaml");
  REQUIRE(m.nodes.size() == 2);
  CHECK(m.head().address == "127.0.0.1");
  CHECK(m.workers()[0]->address == "127.0.0.2");
  CHECK(m.head().root != m.workers()[0]->root);
  CHECK(m.engine.serve.device == "cpu");
  CHECK(m.deadman.backend == DeadmanBackend::agent);
  // A tiny model trained on code and docs: the long-context gate serves the prompt but cannot ask
  // for the needle.
  CHECK(m.gates.long_retrieval_tokens == 2048);
  CHECK_FALSE(m.gates.long_retrieval_require_needle);
  // The repository's trained pair: the first bind runs DFlash and its gate reads the counters.
  CHECK(m.engine.model_dir == "/var/lib/tandem/local/models/dflash-pair/target");
  REQUIRE(m.engine.serve.speculative);
  CHECK(m.engine.serve.speculative->method == "dflash");
  CHECK(m.engine.serve.speculative->model == "/var/lib/tandem/local/models/dflash-pair/drafter");
  CHECK(m.engine.serve.speculative->num_speculative_tokens == 7);
  CHECK(m.gates.spec_metrics);
}

// deploy/gpu-bind.sh hands this manifest to deploy/local-bind.sh, which builds the sandboxes, the
// model copy and the agents for local.yaml's nodes, paths and ports: they must be the same.
TEST_CASE("the local bind's GPU twin: the embedded default's nodes and paths, ranks and old lane on cuda") {
  Manifest cpu = load_ok("manifests/local.yaml");
  Manifest gpu = load_ok("manifests/local-cuda.yaml");
  REQUIRE(gpu.nodes.size() == cpu.nodes.size());
  for (size_t i = 0; i < gpu.nodes.size(); ++i) {
    CHECK(gpu.nodes[i].name == cpu.nodes[i].name);
    CHECK(gpu.nodes[i].address == cpu.nodes[i].address);
    CHECK(gpu.nodes[i].root == cpu.nodes[i].root);
    CHECK(gpu.nodes[i].agent_port == cpu.nodes[i].agent_port);
  }
  CHECK(gpu.engine.binary == cpu.engine.binary);
  CHECK(gpu.engine.model_dir == cpu.engine.model_dir);
  CHECK(gpu.engine.serve.port == cpu.engine.serve.port);
  CHECK(gpu.engine.rendezvous.port == cpu.engine.rendezvous.port);
  CHECK(gpu.rollback.verify.url == cpu.rollback.verify.url);
  CHECK(gpu.engine.serve.device == "cuda");
  CHECK(gpu.engine.serve.tensor_parallel_size == 2);
  // Two ranks share the card: a fixed pool each, not a share of the card the first rank would take.
  CHECK(gpu.engine.serve.kv_cache_memory == std::optional<std::uint64_t>(256ull << 20));
  // The agents start the ranks with a clean environment: the bundle's libraries come through it.
  CHECK(gpu.engine.env.at("LD_LIBRARY_PATH") == "/var/lib/tandem/local/lib");
  REQUIRE(gpu.rollback.commands.size() == 1);
  const std::string old_lane = gpu.rollback.commands[0].run.back();
  CHECK(old_lane.find("LD_LIBRARY_PATH=/var/lib/tandem/local/lib ") != std::string::npos);
  CHECK(old_lane.find("--device cuda") != std::string::npos);
}

TEST_CASE("defaults fill what a minimal manifest leaves out") {
  const char* text = R"(apiVersion: tandem/v1
kind: Bind
nodes:
  - {name: a, address: 10.1.0.1, role: head}
  - {name: b, address: 10.1.0.2, role: worker}
engine:
  binary: /usr/bin/tandem-serve
  model_dir: /m
  run_user: svc
  cache_dir: /home/svc/.cache
  serve: {port: 8000, tensor_parallel_size: 2, gpu_memory_utilization: 0.9}
gates: {tool_call: false}  # on by default, and it needs enable_auto_tool_choice
deadman: {delay: 2h}
rollback:
  commands: [{run: [/bin/true]}]
  verify: {url: "http://10.1.0.1:8000/health"}
)";
  auto r = load_manifest_text(text, "min.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  const Manifest& m = *r.manifest;
  CHECK(m.nodes[0].agent_port == 7443);
  CHECK(m.nodes[0].ssh_port == 22);
  CHECK(m.nodes[0].root == "/");
  CHECK(m.hygiene.shm_patterns == std::vector<std::string>{"torch_*", "psm_*", "nccl-*"});
  CHECK(m.rollback.commands[0].on == "all");
  CHECK(m.engine.rendezvous.timeout == Duration(2min));
  CHECK_FALSE(m.gates.long_retrieval_tokens);
  CHECK(m.gates.long_retrieval_require_needle);  // when it is turned on, a needle is asked for
}

TEST_CASE("a one-node bind (head alone, tensor_parallel_size 1) is valid; its size must still match") {
  std::string text = R"(apiVersion: tandem/v1
kind: Bind
nodes:
  - {name: solo, address: 10.1.0.1, role: head}
engine:
  binary: /usr/bin/tandem-serve
  model_dir: /m
  run_user: svc
  cache_dir: /home/svc/.cache
  serve: {port: 8000, tensor_parallel_size: 1, gpu_memory_utilization: 0.9}
gates: {tool_call: false}
deadman: {delay: 2h}
rollback:
  commands: [{run: [/bin/true]}]
  verify: {url: "http://10.1.0.1:8000/health"}
)";
  auto r = load_manifest_text(text, "solo.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  CHECK(r.manifest->head().name == "solo");
  CHECK(r.manifest->workers().empty());
  CHECK(r.manifest->start_order().size() == 1);

  text.replace(text.find("tensor_parallel_size: 1"), 23, "tensor_parallel_size: 2");
  auto bad = load_manifest_text(text, "solo.yaml");
  CHECK_FALSE(bad.manifest);
  CHECK(format_diagnostics(bad.errors).find("tensor_parallel_size' is 2 but there are 1 nodes") != std::string::npos);
}
