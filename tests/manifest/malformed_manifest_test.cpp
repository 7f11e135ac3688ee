// Malformed manifests: each case changes a known-good manifest and asserts the exact errors,
// as `file:line:col: message`. Bad input must never crash and must never yield a manifest.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tandem/manifest.hpp"

using namespace tandem;

namespace {

// Line numbers in the expectations below refer to this text; keep it stable.
const std::string kGood = R"(apiVersion: tandem/v1
kind: Bind
metadata:
  name: t
nodes:
  - name: head1
    address: 10.0.0.1
    role: head
    agent: {port: 7443}
  - name: work1
    address: 10.0.0.2
    role: worker
fabric:
  interface: bond0
  subnet: 10.0.0.0/24
engine:
  binary: /opt/tandem/bin/tandem-serve
  model_dir: /models/target
  run_user: svc
  cache_dir: /home/svc/.cache/tandem
  serve:
    port: 8888
    tensor_parallel_size: 2
    gpu_memory_utilization: 0.85
    enable_auto_tool_choice: true
    tool_call_parser: glm47
  rendezvous:
    port: 29521
    timeout: 2m
hygiene:
  page_cache:
    min_mem_available: 115GiB
deadman:
  delay: 70m
  backend: systemd
rollback:
  commands:
    - on: head
      run: [/opt/restore.sh, manual]
  verify:
    url: http://10.0.0.1:8888/health
)";

// Replace the first occurrence of `from` with `to` in kGood (the case fails if `from` is absent).
std::string with(const std::string& from, const std::string& to) {
  std::string s = kGood;
  auto at = s.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "test bug: '" << from << "' not in the base manifest");
  s.replace(at, from.size(), to);
  return s;
}

// All errors for `text`, one `file:line:col: message` per line (doctest prints strings in full).
std::string errors_of(const std::string& text) {
  auto r = load_manifest_text(text, "m.yaml");
  CHECK_FALSE(r.manifest.has_value());
  return format_diagnostics(r.errors);
}

}  // namespace

TEST_CASE("the base manifest of these cases is valid") {
  auto r = load_manifest_text(kGood, "m.yaml");
  INFO(format_diagnostics(r.errors));
  CHECK(r.errors.empty());
  CHECK(r.manifest.has_value());
}

TEST_CASE("unknown key, with a spelling hint") {
  CHECK(errors_of(with("    port: 8888\n", "    prot: 8888\n")) ==
        "m.yaml:21:3: missing required key 'engine.serve.port'\n"
        "m.yaml:22:5: unknown key 'prot' in 'engine.serve'; did you mean 'port'? (expected one of: "
            "block_size, chat_template, default_chat_template_kwargs, device, distributed_executor_backend, enable_auto_tool_choice, "
            "enforce_eager, extra_args, gpu_memory_utilization, host, kv_cache_dtype, kv_cache_memory, load_format, "
            "max_model_len, max_num_seqs, moe_backend, port, reasoning_parser, served_model_name, speculative_config, "
            "tensor_parallel_size, tool_call_parser, trust_remote_code)\n");
}
