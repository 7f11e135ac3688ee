// Malformed manifests: each case changes a known-good manifest and asserts the exact errors,
// as `file:line:col: message`. Bad input must never crash and must never yield a manifest.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <utility>
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

// Several replacements, each of the first occurrence, applied in turn to kGood.
std::string with_all(const std::vector<std::pair<std::string, std::string>>& edits) {
  std::string s = kGood;
  for (const auto& [from, to] : edits) {
    auto at = s.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, "test bug: '" << from << "' not in the edited manifest");
    s.replace(at, from.size(), to);
  }
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

TEST_CASE("YAML syntax: a tab in the indentation") {
  CHECK(errors_of(with("    address: 10.0.0.1\n", "\taddress: 10.0.0.1\n")) ==
        "m.yaml:7:1: YAML syntax error: illegal tab when looking for indentation; line 7 is indented with a tab (YAML indentation must be spaces)\n");
}

TEST_CASE("YAML syntax: a tab before a key inside a map") {
  CHECK(errors_of(with("    port: 8888\n", "\tport: 8888\n")) ==
        "m.yaml:22:2: YAML syntax error: end of map not found; line 22 is indented with a tab (YAML indentation must be spaces)\n");
}

// Reported at the bracket that is not closed, not where the parser gave up (the next line).
TEST_CASE("YAML syntax: an unclosed { in a flow map") {
  CHECK(errors_of(with("{port: 7443}", "{port: 7443")) ==
        "m.yaml:9:12: YAML syntax error: this '{' is not closed by a matching '}' (end of map flow not found at "
        "line 10 col 9)\n");
}

TEST_CASE("YAML syntax: an unclosed [ in a flow list") {
  CHECK(errors_of(with("[/opt/restore.sh, manual]", "[/opt/restore.sh, manual")) ==
        "m.yaml:39:12: YAML syntax error: this '[' is not closed by a matching ']' (end of sequence flow not found at "
        "line 40 col 9)\n");
}

TEST_CASE("not UTF-8: a stray byte is reported at its place, not passed on to JSON output") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    served_model_name: \"glm\xff\"\n")) ==
        "m.yaml:23:28: the manifest is not valid UTF-8 (byte 0xFF); expected UTF-8 text\n");
}

TEST_CASE("an empty document") {
  CHECK(errors_of("") ==
        "m.yaml:1:1: the manifest is empty; expected a map with apiVersion: tandem/v1\n");
}

TEST_CASE("a document with only comments") {
  CHECK(errors_of("# nothing here yet\n") ==
        "m.yaml:1:1: the manifest is empty; expected a map with apiVersion: tandem/v1\n");
}

TEST_CASE("the top level is a list, not a map") {
  CHECK(errors_of("- apiVersion: tandem/v1\n"
             "- kind: Bind\n") ==
        "m.yaml:1:1: the manifest must be a map of keys, got a list\n");
}

TEST_CASE("the top level is a scalar") {
  CHECK(errors_of("tandem/v1\n") ==
        "m.yaml:1:1: the manifest must be a map of keys, got a scalar\n");
}

TEST_CASE("wrong apiVersion") {
  CHECK(errors_of(with("apiVersion: tandem/v1", "apiVersion: tandem/v2")) ==
        "m.yaml:1:13: apiVersion is 'tandem/v2'; this tandemctl reads tandem/v1\n");
}

TEST_CASE("missing apiVersion") {
  CHECK(errors_of(with("apiVersion: tandem/v1\n", "")) ==
        "m.yaml:1:1: missing required key 'apiVersion'\n");
}

TEST_CASE("wrong kind") {
  CHECK(errors_of(with("kind: Bind", "kind: Deployment")) ==
        "m.yaml:2:7: kind is 'Deployment'; expected Bind\n");
}

TEST_CASE("missing kind") {
  CHECK(errors_of(with("kind: Bind\n", "")) ==
        "m.yaml:1:1: missing required key 'kind'\n");
}

TEST_CASE("unknown key at the top, with a hint") {
  CHECK(errors_of(with("fabric:\n", "fabrik:\n")) ==
        "m.yaml:13:1: unknown key 'fabrik' in the manifest; did you mean 'fabric'? (expected one of: apiVersion, deadman, engine, fabric, gates, hygiene, kind, metadata, nodes, rollback, stage)\n");
}

TEST_CASE("unknown key at the top, nothing close enough for a hint") {
  CHECK(errors_of(with("kind: Bind\n", "kind: Bind\n"
           "zzzzzzzz: 1\n")) ==
        "m.yaml:3:1: unknown key 'zzzzzzzz' in the manifest (expected one of: apiVersion, deadman, engine, fabric, gates, hygiene, kind, metadata, nodes, rollback, stage)\n");
}

TEST_CASE("unknown key in a node, with a hint") {
  CHECK(errors_of(with("    role: worker\n", "    role: worker\n"
           "    adress: 10.0.0.9\n")) ==
        "m.yaml:13:5: unknown key 'adress' in 'nodes[1]'; did you mean 'address'? (expected one of: address, agent, fabric_address, name, role, root, ssh)\n");
}

TEST_CASE("unknown key in hygiene.page_cache: a truncated key still gets a hint") {
  CHECK(errors_of(with("    min_mem_available: 115GiB", "    min_mem_avail: 115GiB")) ==
        "m.yaml:32:5: unknown key 'min_mem_avail' in 'hygiene.page_cache'; did you mean 'min_mem_available'? (expected one of: drop, min_mem_available)\n");
}

TEST_CASE("unknown key in hygiene.page_cache: a longer misspelling gets a hint") {
  CHECK(errors_of(with("    min_mem_available: 115GiB", "    min_memory_available: 115GiB")) ==
        "m.yaml:32:5: unknown key 'min_memory_available' in 'hygiene.page_cache'; did you mean 'min_mem_available'? (expected one of: drop, min_mem_available)\n");
}

TEST_CASE("unknown key in rollback.verify, and the url it replaced is missing") {
  CHECK(errors_of(with("    url: http", "    urll: http")) ==
        "m.yaml:40:3: missing required key 'rollback.verify.url'\n"
        "m.yaml:41:5: unknown key 'urll' in 'rollback.verify'; did you mean 'url'? (expected one of: expect_body_contains, timeout, url)\n");
}

TEST_CASE("duplicate key at the top") {
  CHECK(errors_of(with("kind: Bind\n", "kind: Bind\n"
           "kind: Bind\n")) ==
        "m.yaml:3:1: duplicate key 'kind' (first given at line 2)\n");
}

TEST_CASE("duplicate key in engine.serve") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    port: 8889\n")) ==
        "m.yaml:23:5: duplicate key 'port' (first given at line 22)\n");
}

TEST_CASE("a string where an integer is expected (no follow-on error about the node count)") {
  CHECK(errors_of(with("tensor_parallel_size: 2", "tensor_parallel_size: two")) ==
        "m.yaml:23:27: 'engine.serve.tensor_parallel_size' must be an integer, got 'two'\n");
}

TEST_CASE("a list where a map is expected") {
  CHECK(errors_of(with("  page_cache:\n"
           "    min_mem_available: 115GiB\n", "  page_cache: [115GiB]\n")) ==
        "m.yaml:31:15: 'hygiene.page_cache' must be a map of keys, got a list\n");
}

TEST_CASE("a map where a string is expected") {
  CHECK(errors_of(with("run_user: svc", "run_user: {name: svc}")) ==
        "m.yaml:19:13: 'engine.run_user' must be a string, got a map\n");
}

TEST_CASE("'yes' is not a boolean (YAML 1.2), and no follow-on tool gate error") {
  CHECK(errors_of(with("enable_auto_tool_choice: true", "enable_auto_tool_choice: yes")) ==
        "m.yaml:25:30: 'engine.serve.enable_auto_tool_choice' must be true or false, got 'yes'\n");
}

TEST_CASE("a key with no value is reported at the key, not at the next line") {
  CHECK(errors_of(with("role: worker", "role:")) ==
        "m.yaml:12:5: 'nodes[1].role' must be a string, got nothing\n");
}

TEST_CASE("a map with no value is reported at its key") {
  CHECK(errors_of(with("    min_mem_available: 115GiB\n", "")) ==
        "m.yaml:31:3: 'hygiene.page_cache' must be a map of keys, got nothing\n");
}

TEST_CASE("'nodes' is a scalar (no follow-on 'empty' error)") {
  CHECK(errors_of(with("nodes:\n"
           "  - name: head1", "nodes: x\n"
           "nodesx:\n"
           "  - name: head1")) ==
        "m.yaml:5:8: 'nodes' must be a list of nodes, got a scalar\n"
        "m.yaml:6:1: unknown key 'nodesx' in the manifest; did you mean 'nodes'? (expected one of: apiVersion, deadman, engine, fabric, gates, hygiene, kind, metadata, nodes, rollback, stage)\n");
}

TEST_CASE("'nodes' is an empty list") {
  CHECK(errors_of(with("nodes:\n  - name: head1\n    address: 10.0.0.1\n    role: head\n    agent: {port: 7443}\n"
                "  - name: work1\n    address: 10.0.0.2\n    role: worker\n",
                "nodes: []\n")) ==
        "m.yaml:5:1: 'nodes' is empty; expected one head and zero or more workers\n");
}

TEST_CASE("a node that is a scalar, not a map (no follow-on head/worker count errors)") {
  CHECK(errors_of(with("  - name: work1\n"
           "    address: 10.0.0.2\n"
           "    role: worker\n", "  - work1\n")) ==
        "m.yaml:10:5: 'nodes[1]' must be a map of keys, got a scalar\n");
}

TEST_CASE("size with a bad unit: 115GiBs") {
  CHECK(errors_of(with("115GiB", "115GiBs")) ==
        "m.yaml:32:24: 'hygiene.page_cache.min_mem_available' is '115GiBs': unknown size unit 'GiBs'; expected a size like 115GiB, 500MB or 3221225472\n");
}

TEST_CASE("negative size: -3GiB") {
  CHECK(errors_of(with("115GiB", "-3GiB")) ==
        "m.yaml:32:24: 'hygiene.page_cache.min_mem_available' is '-3GiB': a size cannot be negative; expected a size like 115GiB, 500MB or 3221225472\n");
}

TEST_CASE("size with no number: GiB") {
  CHECK(errors_of(with("115GiB", "GiB")) ==
        "m.yaml:32:24: 'hygiene.page_cache.min_mem_available' is 'GiB': a size starts with a number; expected a size like 115GiB, 500MB or 3221225472\n");
}

TEST_CASE("fractional byte count: 12.5") {
  CHECK(errors_of(with("115GiB", "12.5")) ==
        "m.yaml:32:24: 'hygiene.page_cache.min_mem_available' is '12.5': a byte count must be a whole number; expected a size like 115GiB, 500MB or 3221225472\n");
}

TEST_CASE("size with a unit spelled out: 12.5 bytes") {
  CHECK(errors_of(with("115GiB", "12.5 bytes")) ==
        "m.yaml:32:24: 'hygiene.page_cache.min_mem_available' is '12.5 bytes': unknown size unit 'bytes'; expected a size like 115GiB, 500MB or 3221225472\n");
}

TEST_CASE("duration without a unit: 70") {
  CHECK(errors_of(with("delay: 70m", "delay: 70")) ==
        "m.yaml:34:10: 'deadman.delay' is '70': missing unit after '70' (use ms, s, m, h or d); expected a duration like 90s, 70m or 1h30m\n");
}

TEST_CASE("duration with a bad unit: 70x") {
  CHECK(errors_of(with("delay: 70m", "delay: 70x")) ==
        "m.yaml:34:10: 'deadman.delay' is '70x': unknown duration unit 'x' (use ms, s, m, h or d); expected a duration like 90s, 70m or 1h30m\n");
}

TEST_CASE("zero duration: 0s") {
  CHECK(errors_of(with("timeout: 2m", "timeout: 0s")) ==
        "m.yaml:29:14: 'engine.rendezvous.timeout' must be longer than zero\n");
}

TEST_CASE("negative duration: -5m") {
  CHECK(errors_of(with("delay: 70m", "delay: -5m")) ==
        "m.yaml:34:10: 'deadman.delay' is '-5m': a duration cannot be negative; expected a duration like 90s, 70m or 1h30m\n");
}

TEST_CASE("two heads (a missing worker is no error: a one-node bind is allowed)") {
  CHECK(errors_of(with("role: worker", "role: head")) ==
        "m.yaml:12:5: a second head 'work1'; 'head1' is already the head (expected exactly one)\n");
}

TEST_CASE("no head") {
  CHECK(errors_of(with("role: head", "role: worker")) ==
        "m.yaml:5:1: no node has role: head; expected exactly one head\n");
}

TEST_CASE("three nodes, all heads: each extra head is named") {
  CHECK(errors_of(with_all({{"  - name: work1\n"
                   "    address: 10.0.0.2\n"
                   "    role: worker\n", "  - name: work1\n"
                   "    address: 10.0.0.2\n"
                   "    role: head\n"
                   "  - name: work2\n"
                   "    address: 10.0.0.3\n"
                   "    role: head\n"},
                  {"tensor_parallel_size: 2", "tensor_parallel_size: 3"}})) ==
        "m.yaml:12:5: a second head 'work1'; 'head1' is already the head (expected exactly one)\n"
        "m.yaml:15:5: a second head 'work2'; 'head1' is already the head (expected exactly one)\n");
}

TEST_CASE("a misspelled role (no follow-on 'no head' error)") {
  CHECK(errors_of(with("role: head", "role: haed")) ==
        "m.yaml:8:11: 'nodes[0].role' is 'haed'; expected one of: head, worker\n");
}

TEST_CASE("a node with a bad role is still checked for a duplicate name") {
  CHECK(errors_of(with_all({{"role: head", "role: haed"}, {"name: work1", "name: head1"}})) ==
        "m.yaml:8:11: 'nodes[0].role' is 'haed'; expected one of: head, worker\n"
        "m.yaml:10:5: duplicate node name 'head1' (also nodes[0])\n");
}

TEST_CASE("duplicate node names") {
  CHECK(errors_of(with("name: work1", "name: head1")) ==
        "m.yaml:10:5: duplicate node name 'head1' (also nodes[0])\n");
}

TEST_CASE("duplicate node addresses") {
  CHECK(errors_of(with("address: 10.0.0.2", "address: 10.0.0.1")) ==
        "m.yaml:11:5: duplicate node address '10.0.0.1' (also nodes[0]); every node needs its own address\n");
}

TEST_CASE("node name with uppercase letters") {
  CHECK(errors_of(with("name: work1", "name: Work1")) ==
        "m.yaml:10:11: 'nodes[1].name' is 'Work1'; expected a lowercase DNS label (a-z, 0-9, '-'; at most 63 characters)\n");
}

TEST_CASE("empty node address") {
  CHECK(errors_of(with("address: 10.0.0.2", "address: \"\"")) ==
        "m.yaml:11:14: 'nodes[1].address' is empty\n");
}

TEST_CASE("tensor_parallel_size does not match the node count") {
  CHECK(errors_of(with("tensor_parallel_size: 2", "tensor_parallel_size: 3")) ==
        "m.yaml:23:5: 'engine.serve.tensor_parallel_size' is 3 but there are 2 nodes; tandem runs one rank per node, expected 2\n");
}

TEST_CASE("port 0") {
  CHECK(errors_of(with("port: 8888", "port: 0")) ==
        "m.yaml:22:11: 'engine.serve.port' is 0; expected 1 to 65535\n");
}

TEST_CASE("port 70000") {
  CHECK(errors_of(with("port: 29521", "port: 70000")) ==
        "m.yaml:28:11: 'engine.rendezvous.port' is 70000; expected 1 to 65535\n");
}

TEST_CASE("port given as a word") {
  CHECK(errors_of(with("{port: 7443}", "{port: https}")) ==
        "m.yaml:9:19: 'nodes[0].agent.port' must be an integer, got 'https'\n");
}

TEST_CASE("rendezvous port equals the serving port") {
  CHECK(errors_of(with("port: 29521", "port: 8888")) ==
        "m.yaml:28:5: the rendezvous port and the serving port are both 8888; expected two different ports\n");
}

TEST_CASE("serving port equals the head's agent port") {
  CHECK(errors_of(with("port: 8888", "port: 7443")) ==
        "m.yaml:22:5: 'engine.serve.port' 7443 is also the head's agent port; expected two different ports\n");
}

TEST_CASE("relative engine.binary") {
  CHECK(errors_of(with("binary: /opt/tandem/bin/tandem-serve", "binary: bin/tandem-serve")) ==
        "m.yaml:17:11: 'engine.binary' is 'bin/tandem-serve'; expected an absolute path (starting with /)\n");
}

TEST_CASE("relative engine.model_dir") {
  CHECK(errors_of(with("model_dir: /models/target", "model_dir: models/target")) ==
        "m.yaml:18:14: 'engine.model_dir' is 'models/target'; expected an absolute path (starting with /)\n");
}

TEST_CASE("'~' is not expanded in engine.cache_dir") {
  CHECK(errors_of(with("cache_dir: /home/svc/.cache/tandem", "cache_dir: ~/.cache/tandem")) ==
        "m.yaml:20:14: 'engine.cache_dir' is '~/.cache/tandem'; expected an absolute path (starting with /)\n");
}

TEST_CASE("relative chat_template") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    chat_template: tmpl.jinja\n")) ==
        "m.yaml:23:20: 'engine.serve.chat_template' is 'tmpl.jinja'; expected an absolute path (starting with /)\n");
}

TEST_CASE("relative pin path") {
  CHECK(errors_of(with("  serve:\n", "  pins:\n"
           "    - path: config.json\n"
           "  serve:\n")) ==
        "m.yaml:22:13: 'engine.pins[0].path' is 'config.json'; expected an absolute path (starting with /)\n");
}

TEST_CASE("relative argv[0] of a rollback command") {
  CHECK(errors_of(with("[/opt/restore.sh, manual]", "[restore.sh, manual]")) ==
        "m.yaml:39:13: 'rollback.commands[0].run[0]' is 'restore.sh'; expected an absolute path (starting with /)\n");
}

TEST_CASE("relative node root") {
  CHECK(errors_of(with("    role: worker\n", "    role: worker\n"
           "    root: sandbox/w\n")) ==
        "m.yaml:13:11: 'nodes[1].root' is 'sandbox/w'; expected an absolute path (starting with /)\n");
}

TEST_CASE("'..' in an absolute path") {
  CHECK(errors_of(with("model_dir: /models/target", "model_dir: /models/../etc")) ==
        "m.yaml:18:14: 'engine.model_dir' is '/models/../etc'; '..' is not allowed in paths\n");
}

TEST_CASE("sha256 that is not 64 lowercase hex digits") {
  CHECK(errors_of(with("  serve:\n", "  pins:\n"
           "    - path: /m/config.json\n"
           "      sha256: ABC123\n"
           "  serve:\n")) ==
        "m.yaml:23:15: 'engine.pins[0].sha256' is not a SHA-256; expected 64 lowercase hex digits\n");
}

TEST_CASE("the same file pinned twice") {
  CHECK(errors_of(with("  serve:\n", "  pins:\n"
           "    - path: /m/config.json\n"
           "    - path: /m/config.json\n"
           "  serve:\n")) ==
        "m.yaml:23:7: '/m/config.json' is pinned twice (also engine.pins[0])\n");
}

TEST_CASE("fabric subnet that is not a CIDR") {
  CHECK(errors_of(with("10.0.0.0/24", "10.0.0.0/33")) ==
        "m.yaml:15:3: 'fabric.subnet' is '10.0.0.0/33'; expected an IPv4 CIDR like 10.0.0.0/24\n");
}

TEST_CASE("node address outside the fabric subnet") {
  CHECK(errors_of(with("address: 10.0.0.2", "address: 10.0.1.2")) ==
        "m.yaml:11:5: node 'work1' fabric address '10.0.1.2' is outside fabric.subnet 10.0.0.0/24; the rendezvous would not use the fabric\n");
}

TEST_CASE("node address that is a host name while a fabric subnet is set") {
  CHECK(errors_of(with("address: 10.0.0.2", "address: spark2.local")) ==
        "m.yaml:11:5: node 'work1' fabric address 'spark2.local' is not an IPv4 address, so it cannot be checked against fabric.subnet 10.0.0.0/24; expected an IPv4 address (set nodes[1].fabric_address)\n");
}

TEST_CASE("speculative_config missing model and num_speculative_tokens") {
  CHECK(errors_of(with("    tool_call_parser: glm47\n", "    tool_call_parser: glm47\n"
           "    speculative_config: {method: dflash}\n")) ==
        "m.yaml:27:5: missing required key 'engine.serve.speculative_config.model'\n"
        "m.yaml:27:5: missing required key 'engine.serve.speculative_config.num_speculative_tokens'\n");
}

TEST_CASE("speculative_config with an unknown method") {
  CHECK(errors_of(with("    tool_call_parser: glm47\n", "    tool_call_parser: glm47\n"
           "    speculative_config: {method: eagle, model: /d, num_speculative_tokens: 7}\n")) ==
        "m.yaml:27:34: 'engine.serve.speculative_config.method' is 'eagle'; expected one of: dflash\n");
}

TEST_CASE("num_speculative_tokens out of range") {
  CHECK(errors_of(with("    tool_call_parser: glm47\n", "    tool_call_parser: glm47\n"
           "    speculative_config: {method: dflash, model: /d, num_speculative_tokens: 64}\n")) ==
        "m.yaml:27:77: 'engine.serve.speculative_config.num_speculative_tokens' is 64; expected 1 to 63\n");
}

TEST_CASE("drafter_dir disagrees with speculative_config.model") {
  CHECK(errors_of(with_all({{"    tool_call_parser: glm47\n", "    tool_call_parser: glm47\n"
                   "    speculative_config: {method: dflash, model: /d, num_speculative_tokens: 7}\n"},
                  {"  run_user: svc\n", "  drafter_dir: /other\n"
                   "  run_user: svc\n"}})) ==
        "m.yaml:19:3: 'engine.drafter_dir' is '/other' but speculative_config.model is '/d'; expected the same directory\n");
}

TEST_CASE("drafter_dir without speculative_config") {
  CHECK(errors_of(with("  run_user: svc\n", "  drafter_dir: /d\n"
           "  run_user: svc\n")) ==
        "m.yaml:19:3: 'engine.drafter_dir' is set but engine.serve.speculative_config is missing; expected both or neither\n");
}

TEST_CASE("spec_metrics gate without speculative decoding") {
  CHECK(errors_of(with("deadman:\n", "gates:\n"
           "  spec_metrics: {min_acceptance: 0.3}\n"
           "deadman:\n")) ==
        "m.yaml:34:3: 'gates.spec_metrics' is on but engine.serve.speculative_config is missing; there would be no speculative metrics to check\n");
}

TEST_CASE("spec_metrics gate: its prompt is a string, its max_tokens bounded") {
  const std::string spec = "    tool_call_parser: glm47\n"
                           "    speculative_config: {method: dflash, model: /models/drafter, num_speculative_tokens: 7}\n";
  auto gates = [&](const std::string& line) {
    return with_all({{"    tool_call_parser: glm47\n", spec}, {"deadman:\n", "gates:\n  spec_metrics: " + line + "\ndeadman:\n"}});
  };
  CHECK(errors_of(gates("{prompt: \"x\", max_tokens: 0}")) ==
        "m.yaml:35:43: 'gates.spec_metrics.max_tokens' is 0; expected 1 to 4096\n");
  CHECK(errors_of(gates("{prompt: [a], max_tokens: 32}")) ==
        "m.yaml:35:26: 'gates.spec_metrics.prompt' must be a string, got a list\n");
  auto ok = load_manifest_text(gates("{min_acceptance: 0.4, prompt: \"def main(\", max_tokens: 32}"), "m.yaml");
  INFO(format_diagnostics(ok.errors));
  REQUIRE(ok.manifest.has_value());
  CHECK(ok.manifest->gates.spec_prompt == "def main(");
  CHECK(ok.manifest->gates.spec_prompt_tokens == 32);
  CHECK(*ok.manifest->gates.min_acceptance == doctest::Approx(0.4));
}

TEST_CASE("long_retrieval longer than max_model_len allows") {
  CHECK(errors_of(with_all({{"    tensor_parallel_size: 2\n", "    tensor_parallel_size: 2\n    max_model_len: 4096\n"},
                            {"deadman:\n", "gates:\n"
                             "  long_retrieval: {context_tokens: 4090}\n"
                             "deadman:\n"}})) ==
        "m.yaml:35:20: 'gates.long_retrieval.context_tokens' is 4090 but engine.serve.max_model_len is 4096; the prompt and a 64-token answer must fit. Expected at most 4032\n");
  // 4032 + 64 fits exactly.
  auto ok = load_manifest_text(with_all({{"    tensor_parallel_size: 2\n", "    tensor_parallel_size: 2\n    max_model_len: 4096\n"},
                                         {"deadman:\n", "gates:\n"
                                          "  long_retrieval: {context_tokens: 4032}\n"
                                          "deadman:\n"}}),
                               "m.yaml");
  CHECK(ok.errors.empty());
  REQUIRE(ok.manifest);
  CHECK(ok.manifest->gates.long_retrieval_tokens == 4032);
}

TEST_CASE("long_retrieval.require_needle must be a boolean") {
  CHECK(errors_of(with("deadman:\n", "gates:\n"
                       "  long_retrieval: {context_tokens: 1024, require_needle: maybe}\n"
                       "deadman:\n")) ==
        "m.yaml:34:58: 'gates.long_retrieval.require_needle' must be true or false, got 'maybe'\n");
}

TEST_CASE("tool_call gate on, auto tool choice off") {
  CHECK(errors_of(with_all({{"    enable_auto_tool_choice: true\n", ""},
                  {"deadman:\n", "gates:\n"
                   "  tool_call: true\n"
                   "deadman:\n"}})) ==
        "m.yaml:33:3: 'gates.tool_call' is on but engine.serve.enable_auto_tool_choice is not; the gate would fail\n");
}

TEST_CASE("tool_call gate on by default, auto tool choice off") {
  CHECK(errors_of(with("    enable_auto_tool_choice: true\n", "")) ==
        "m.yaml:21:3: 'gates.tool_call' is on by default but engine.serve.enable_auto_tool_choice is not; the gate would fail. Expected enable_auto_tool_choice: true (with a tool_call_parser), or gates.tool_call: false\n");
}

TEST_CASE("enable_auto_tool_choice without a tool_call_parser") {
  CHECK(errors_of(with("    tool_call_parser: glm47\n", "")) ==
        "m.yaml:25:5: 'engine.serve.enable_auto_tool_choice' needs engine.serve.tool_call_parser (glm45 or glm47)\n");
}

TEST_CASE("block_size not a multiple of 16") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    block_size: 17\n")) ==
        "m.yaml:23:17: 'engine.serve.block_size' is 17; expected a multiple of 16\n");
}

TEST_CASE("gpu_memory_utilization 0") {
  CHECK(errors_of(with("0.85", "0")) ==
        "m.yaml:24:29: 'engine.serve.gpu_memory_utilization' is 0; expected more than 0 and at most 1\n");
}

TEST_CASE("gpu_memory_utilization 1.5") {
  CHECK(errors_of(with("0.85", "1.5")) ==
        "m.yaml:24:29: 'engine.serve.gpu_memory_utilization' is 1.5; expected more than 0 and at most 1\n");
}

TEST_CASE("kv_cache_dtype not a known type") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    kv_cache_dtype: fp8\n")) ==
        "m.yaml:23:21: 'engine.serve.kv_cache_dtype' is 'fp8'; expected one of: auto, bfloat16, fp8_e4m3\n");
}

TEST_CASE("default_chat_template_kwargs not a map") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    default_chat_template_kwargs: enable_thinking=false\n")) ==
        "m.yaml:23:35: 'engine.serve.default_chat_template_kwargs' must be a map like {enable_thinking: false}, got a scalar\n");
}

TEST_CASE("default_chat_template_kwargs that refers to itself through an alias") {
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n"
           "    default_chat_template_kwargs: &kw {x: *kw}\n")) ==
        "m.yaml:23:35: 'engine.serve.default_chat_template_kwargs' is nested too deeply or too large (or refers to itself through an alias) or holds text that is not UTF-8; expected a small map like {enable_thinking: false}\n");
}

// Found by fuzz/manifest_fuzz.cpp: in this manifest (control bytes and a NUL in a kwargs key)
// yaml-cpp hands back a string that is not UTF-8; the kwargs' JSON dump() threw type_error.316
// and the exception ended tandemctl. The control bytes are now refused before YAML is parsed;
// the kwargs' own check (not UTF-8) stays behind that for text without them.
TEST_CASE("default_chat_template_kwargs that do not make JSON text are an error, not an exception") {
  LoadResult r;
  REQUIRE_NOTHROW(r = load_manifest_file(TANDEM_SOURCE_DIR "/fuzz/corpus/manifest/crash-kwargs-invalid-utf8"));
  CHECK_FALSE(r.manifest.has_value());
  CHECK(format_diagnostics(r.errors).find("the manifest contains the control character 0x13") != std::string::npos);
}

TEST_CASE("env key that is not a variable name (reported once, not again as unknown)") {
  CHECK(errors_of(with("  serve:\n", "  env:\n"
           "    NCCL-DEBUG: INFO\n"
           "    OK_VAR: \"1\"\n"
           "  serve:\n")) ==
        "m.yaml:22:5: 'engine.env' key 'NCCL-DEBUG' is not an environment variable name; expected letters, digits and '_', not starting with a digit\n");
}

TEST_CASE("env value that is a map") {
  CHECK(errors_of(with("  serve:\n", "  env:\n"
           "    NCCL_DEBUG: {level: INFO}\n"
           "  serve:\n")) ==
        "m.yaml:22:17: 'engine.env.NCCL_DEBUG' must be a string, got a map\n");
}

TEST_CASE("dead-man delay shorter than a healthy bind") {
  CHECK(errors_of(with("delay: 70m", "delay: 30m")) ==
        "m.yaml:34:3: 'deadman.delay' is 30m, not longer than a healthy bind may take (port_dark_timeout + rendezvous.timeout + gates.serve_timeout = 33m); the dead-man would roll back a good bind. Expected more than 33m\n");
}

TEST_CASE("unknown dead-man backend") {
  CHECK(errors_of(with("backend: systemd", "backend: cron")) ==
        "m.yaml:35:12: 'deadman.backend' is 'cron'; expected one of: systemd, agent\n");
}

TEST_CASE("command 'on' names an unknown node") {
  CHECK(errors_of(with("- on: head", "- on: head2")) ==
        "m.yaml:38:7: command runs on 'head2', which is not a node; expected all, head, worker or a node name\n");
}

TEST_CASE("command with an empty run list") {
  CHECK(errors_of(with("[/opt/restore.sh, manual]", "[]")) ==
        "m.yaml:39:12: 'rollback.commands[0].run' must be a non-empty argv list like [/usr/bin/docker, compose, down] (no shell)\n");
}

TEST_CASE("rollback without commands") {
  CHECK(errors_of(with("  commands:\n"
           "    - on: head\n"
           "      run: [/opt/restore.sh, manual]\n", "")) ==
        "m.yaml:36:1: missing required key 'rollback.commands'\n");
}

TEST_CASE("rollback with an empty command list") {
  CHECK(errors_of(with("  commands:\n"
           "    - on: head\n"
           "      run: [/opt/restore.sh, manual]\n", "  commands: []\n")) ==
        "m.yaml:37:13: 'rollback.commands' is empty; expected at least one command\n");
}

TEST_CASE("rollback.verify url that is not http") {
  CHECK(errors_of(with("http://10.0.0.1:8888/health", "ftp://10.0.0.1/health")) ==
        "m.yaml:41:10: 'rollback.verify.url' is 'ftp://10.0.0.1/health': scheme 'ftp' is not http or https; expected an "
        "http:// URL like http://10.0.0.1:8000/health\n");
}

TEST_CASE("shm patterns with '/' or starting with '..'") {
  CHECK(errors_of(with("hygiene:\n", "hygiene:\n"
           "  shm:\n"
           "    patterns: [\"torch_*\", \"../etc/*\", \"a/b\"]\n")) ==
        "m.yaml:32:27: 'hygiene.shm.patterns[1]' is '../etc/*'; expected a file-name glob inside /dev/shm such as 'torch_*' (no '/', not '*' alone, not starting with '..')\n"
        "m.yaml:32:39: 'hygiene.shm.patterns[2]' is 'a/b'; expected a file-name glob inside /dev/shm such as 'torch_*' (no '/', not '*' alone, not starting with '..')\n");
}

TEST_CASE("shm pattern '*' alone") {
  CHECK(errors_of(with("hygiene:\n", "hygiene:\n"
           "  shm:\n"
           "    patterns: [\"*\"]\n")) ==
        "m.yaml:32:16: 'hygiene.shm.patterns[0]' is '*'; expected a file-name glob inside /dev/shm such as 'torch_*' (no '/', not '*' alone, not starting with '..')\n");
}

TEST_CASE("cron patterns not a list") {
  CHECK(errors_of(with("hygiene:\n", "hygiene:\n"
           "  cron:\n"
           "    patterns: inference-watchdog\n")) ==
        "m.yaml:32:15: 'hygiene.cron.patterns' must be a list of strings, got a scalar\n");
}

TEST_CASE("several errors at once are all reported, sorted by line") {
  CHECK(errors_of(with_all({{"kind: Bind", "kind: Bindd"},
                  {"    address: 10.0.0.2", "    address: 10.0.0.1"},
                  {"delay: 70m", "delay: 70"},
                  {"port: 8888", "port: 0"},
                  {"    role: worker\n", "    role: worker\n"
                   "    adress: x\n"}})) ==
        "m.yaml:2:7: kind is 'Bindd'; expected Bind\n"
        "m.yaml:11:5: duplicate node address '10.0.0.1' (also nodes[0]); every node needs its own address\n"
        "m.yaml:13:5: unknown key 'adress' in 'nodes[1]'; did you mean 'address'? (expected one of: address, agent, fabric_address, name, role, root, ssh)\n"
        "m.yaml:23:11: 'engine.serve.port' is 0; expected 1 to 65535\n"
        "m.yaml:35:10: 'deadman.delay' is '70': missing unit after '70' (use ms, s, m, h or d); expected a duration like 90s, 70m or 1h30m\n");
}

// ---- Nothing crashes, whatever the input -------------------------------------------------------

TEST_CASE("random mutations of the base manifest never throw and never yield both a manifest and errors") {
  std::mt19937 rng(20260827);  // fixed seed: the same 200 inputs on every run
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  auto lines_of = [](const std::string& s) {
    std::vector<std::string> lines;
    size_t at = 0;
    while (at < s.size()) {
      size_t nl = s.find('\n', at);
      if (nl == std::string::npos) nl = s.size() - 1;
      lines.push_back(s.substr(at, nl - at + 1));
      at = nl + 1;
    }
    return lines;
  };
  int with_manifest = 0, with_errors = 0;
  for (int i = 0; i < 200; ++i) {
    std::string text = kGood;
    const int edits = 1 + static_cast<int>(pick(3));
    for (int e = 0; e < edits; ++e) {
      auto lines = lines_of(text);
      if (lines.empty()) break;
      switch (pick(3)) {
        case 0:  // delete a line
          lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(pick(lines.size())));
          break;
        case 1: {  // duplicate a line
          size_t at = pick(lines.size());
          lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), lines[at]);
          break;
        }
        default: {  // swap two characters
          std::string joined;
          for (const auto& l : lines) joined += l;
          std::swap(joined[pick(joined.size())], joined[pick(joined.size())]);
          lines = {joined};
          break;
        }
      }
      text.clear();
      for (const auto& l : lines) text += l;
    }
    INFO("mutation " << i << ":\n" << text);
    LoadResult r;
    CHECK_NOTHROW(r = load_manifest_text(text, "m.yaml"));
    CHECK(r.manifest.has_value() != !r.errors.empty());
    for (const auto& d : r.errors) {
      CHECK(d.line >= 1);
      CHECK(d.column >= 1);
    }
    (r.manifest ? with_manifest : with_errors)++;
  }
  // The mutations are not all harmless, nor all fatal: both outcomes are exercised.
  CHECK(with_manifest > 0);
  CHECK(with_errors > 0);
}

TEST_CASE("a 300000-character environment variable name does not overflow the stack") {
  std::string text = with("  serve:\n", "  env:\n    ? " + std::string(300000, 'A') + "\n    : x\n  serve:\n");
  auto r = load_manifest_text(text, "m.yaml");
  CHECK(r.errors.empty());
  REQUIRE(r.manifest);
  CHECK(r.manifest->engine.env.at(std::string(300000, 'A')) == "x");
}

TEST_CASE("deeply nested flow collections are an error, not a crash") {
  std::string deep = "default_chat_template_kwargs: " + std::string(5000, '[') + std::string(5000, ']');
  auto r = load_manifest_text(with("    port: 8888\n", "    port: 8888\n    " + deep + "\n"), "m.yaml");
  CHECK_FALSE(r.manifest);
  CHECK_FALSE(r.errors.empty());
  std::string nested = "{a: ";
  for (int i = 0; i < 40; ++i) nested += "{a: ";
  nested += "1" + std::string(41, '}');
  CHECK(errors_of(with("    port: 8888\n", "    port: 8888\n    default_chat_template_kwargs: " + nested + "\n")) ==
        "m.yaml:23:35: 'engine.serve.default_chat_template_kwargs' is nested too deeply or too large (or refers to "
        "itself through an alias) or holds text that is not UTF-8; expected a small map like {enable_thinking: false}\n");
}

TEST_CASE("stage: defaults, then every key checked") {
  const std::string base = kGood + "stage:\n  from: head\n";
  auto r = load_manifest_text(base, "m.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  REQUIRE(r.manifest->stage);
  const Stage& st = *r.manifest->stage;
  CHECK(st.items.size() == 4);  // every item; only those the engine names are staged
  CHECK(st.parallel == 4);
  CHECK(st.chunk == 8ull << 20);
  CHECK_FALSE(st.rate_limit);
  CHECK_FALSE(st.prune);
  CHECK(st.backup_budget == 8ull << 30);
  CHECK(st.from == Stage::From::head);
  auto pushed = load_manifest_text(kGood + "stage:\n  from: controller\n", "m.yaml");
  REQUIRE(pushed.manifest);
  CHECK(pushed.manifest->stage->from == Stage::From::controller);
  CHECK(errors_of(kGood + "stage:\n  from: [controller]\n").find("m.yaml:43:9: 'stage.from'") == 0);
  const auto paths = r.manifest->staged_paths();
  REQUIRE(paths.size() == 2);  // binary and model_dir; no pins, no drafter in the base manifest
  CHECK(paths[0].path == "/opt/tandem/bin/tandem-serve");
  CHECK_FALSE(paths[0].dir);
  CHECK(paths[1].path == "/models/target");
  CHECK(paths[1].dir);

  auto tuned = load_manifest_text(kGood + "stage:\n  items: [model, binary]\n  parallel: 8\n  chunk: 1MiB\n"
                                          "  rate_limit: 100MiB\n  prune: true\n  backup_budget: 1GiB\n",
                                  "m.yaml");
  INFO(format_diagnostics(tuned.errors));
  REQUIRE(tuned.manifest);
  CHECK(tuned.manifest->stage->parallel == 8);
  CHECK(tuned.manifest->stage->chunk == 1ull << 20);
  CHECK(tuned.manifest->stage->rate_limit == 100ull << 20);
  CHECK(tuned.manifest->stage->prune);
  CHECK(tuned.manifest->stage->backup_budget == 1ull << 30);
  CHECK(tuned.manifest->staged_paths()[0].path == "/models/target");

  CHECK(errors_of(kGood + "stage:\n  from: laptop\n  items: [binary, model, binary, weights, drafter]\n  parallel: 0\n"
                          "  chunk: 1KiB\n  rate_limit: 10\n  prunee: true\n") ==
        "m.yaml:43:9: 'stage.from' is 'laptop'; expected one of: head, controller\n"
        "m.yaml:44:3: 'stage.items' names drafter but engine.drafter_dir (or speculative_config.model) is not set; "
        "expected only items the engine section names\n"
        "m.yaml:44:26: 'stage.items[2]' names 'binary' twice\n"
        "m.yaml:44:34: 'stage.items[3]' is 'weights'; expected one of binary, pins, model, drafter\n"
        "m.yaml:45:13: 'stage.parallel' is 0; expected 1 to 64\n"
        "m.yaml:46:10: 'stage.chunk' is 1 KiB; expected 64KiB to 64MiB\n"
        "m.yaml:47:15: 'stage.rate_limit' is 10 B per second; expected at least 4KiB (or no rate_limit for the fabric's speed)\n"
        "m.yaml:48:3: unknown key 'prunee' in 'stage'; did you mean 'prune'? (expected one of: backup_budget, chunk, files, "
        "from, items, parallel, prune, rate_limit)\n");
}

TEST_CASE("stage.files: a source path staged to another target, pinned; every key checked") {
  const std::string pin(64, 'c');
  auto r = load_manifest_text(kGood + "stage:\n  items: [model]\n  files:\n"
                                      "    - {source: /opt/build/tandem-serve, target: /usr/local/bin/tandem-serve, sha256: " + pin + "}\n"
                                      "    - {source: /srv/templates/chat.jinja, target: /etc/tandem/chat.jinja}\n",
                              "m.yaml");
  INFO(format_diagnostics(r.errors));
  REQUIRE(r.manifest);
  const auto paths = r.manifest->staged_paths();
  REQUIRE(paths.size() == 3);
  CHECK(paths[1].path == "/usr/local/bin/tandem-serve");
  CHECK(paths[1].source == "/opt/build/tandem-serve");
  CHECK(paths[1].sha256 == pin);
  CHECK_FALSE(paths[1].dir);
  CHECK(paths[2].path == "/etc/tandem/chat.jinja");
  CHECK(paths[2].sha256.empty());

  CHECK(errors_of(kGood + "stage:\n  files:\n    - {source: opt/x, target: /usr/local/bin/x, sha256: ABC}\n"
                          "    - {target: /usr/local/bin/x, mode: 0755}\n"
                          "    - {source: /opt/y, target: /models/target/config.json}\n") ==
        "m.yaml:44:16: 'stage.files[0].source' is 'opt/x'; expected an absolute path (starting with /)\n"
        "m.yaml:44:57: 'stage.files[0].sha256' is not a SHA-256; expected 64 lowercase hex digits\n"
        "m.yaml:45:7: missing required key 'stage.files[1].source'\n"
        "m.yaml:45:16: 'stage.files[1].target' is /usr/local/bin/x, already the target of an earlier stage.files entry; "
        "expected each target once\n"
        "m.yaml:45:34: unknown key 'mode' in 'stage.files[1]' (expected one of: sha256, source, target)\n"
        "m.yaml:46:7: 'stage.files[2].target' is /models/target/config.json, which stage.items already stages "
        "(/models/target/*); expected a path no item stages\n");
  CHECK(errors_of(kGood + "stage:\n  files: /opt/x\n") ==
        "m.yaml:43:10: 'stage.files' must be a list of {source, target, sha256}, got a scalar\n");
}
