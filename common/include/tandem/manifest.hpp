// The bind manifest (apiVersion tandem/v1) as typed C++ values.
// manifests/README.md is the reference for every key; keep the two in step.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tandem/diagnostics.hpp"
#include "tandem/result.hpp"
#include "tandem/units.hpp"

namespace tandem {

// Where a value came from, so later checks (and bind errors) can point at the file.
struct Mark {
  int line = 0;
  int column = 0;
};

enum class Role { head, worker };

struct Node {
  std::string name;
  std::string address;         // how the controller reaches the node (SSH, agent)
  std::string fabric_address;  // the rendezvous/NCCL address; defaults to address
  Role role = Role::worker;
  std::string ssh_user = "root";
  int ssh_port = 22;
  int agent_port = 7443;
  std::string root = "/";  // host paths resolve under this prefix (sandboxed test nodes)
  Mark mark;
};

struct Fabric {
  std::string interface;  // e.g. bond0; empty: whatever routes to the head
  std::string subnet;     // CIDR, e.g. 10.0.0.0/24; empty: not checked
};

struct PinnedFile {
  std::string path;
  std::string sha256;  // 64 lowercase hex, or empty: only compared across ranks
  Mark mark;
};

struct Speculative {
  std::string method;  // "dflash"
  std::string model;   // drafter directory
  int num_speculative_tokens = 0;
};

// The serve flags of the seed recipe, named as vLLM names them (--kebab-case <-> snake_case).
struct ServeFlags {
  std::string served_model_name;
  std::string host = "0.0.0.0";
  int port = 8000;
  bool trust_remote_code = false;
  std::string load_format;  // empty: engine default
  int tensor_parallel_size = 1;
  double gpu_memory_utilization = 0.9;
  int max_model_len = 0;  // 0: from the model config
  int max_num_seqs = 0;   // 0: engine default
  int block_size = 0;     // 0: engine default
  std::string moe_backend;
  std::optional<Speculative> speculative;
  std::string kv_cache_dtype = "auto";
  std::optional<std::uint64_t> kv_cache_memory;  // bytes
  bool enforce_eager = false;
  std::string chat_template;
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  std::string reasoning_parser;
  std::string default_chat_template_kwargs;  // JSON object text, as given on the command line
  std::string distributed_executor_backend;
  std::string device = "cuda";  // cuda | cpu
  std::vector<std::string> extra_args;
};

struct Rendezvous {
  int port = 29500;
  Duration timeout = std::chrono::minutes(2);
};

struct Engine {
  std::string binary;
  std::string model_dir;
  std::string drafter_dir;  // empty when no speculative decoding
  std::string run_user;
  std::string cache_dir;
  std::vector<PinnedFile> pins;  // configs and templates to hash and compare
  ServeFlags serve;
  Rendezvous rendezvous;
  std::map<std::string, std::string> env;  // extra environment for both ranks
};

// A command the agent may run: an argv (no shell), on the nodes it names.
struct Command {
  std::string on = "all";  // all | head | worker | <node name>
  std::vector<std::string> run;
  Duration timeout = std::chrono::minutes(5);
  Mark mark;
};

struct Hygiene {
  std::vector<std::string> cron_patterns;
  bool cron_include_systemd_timers = true;
  std::vector<Command> stop;
  Duration port_dark_timeout = std::chrono::seconds(60);
  std::vector<std::string> shm_patterns{"torch_*", "psm_*", "nccl-*"};
  bool drop_page_cache = true;
  std::optional<std::uint64_t> min_mem_available;  // bytes
  bool cache_dir_user_owned = true;
};

// A check of the operator's own (the seed's "Hermes FINAL_ROUTE_OK"), run after the built-in gates;
// a failure fails the bind like theirs. The plan's step is gate.custom.<name>.
struct CustomGate {
  enum class Kind { http, command };
  std::string name;  // unique among custom gates; [a-z0-9_-], 1..63
  Kind kind = Kind::http;
  Duration timeout = std::chrono::seconds(60);
  // http: one request; a reply must have the status and, when given, the substring and the value.
  std::string method = "GET";
  std::string url;   // http://HOST:PORT/PATH, or /PATH on the head's serve port
  std::string body;  // sent as is, as application/json
  int expect_status = 200;
  std::string expect_body_contains;
  std::string expect_json_path;                   // a JSON Pointer (RFC 6901): /choices/0/message/content
  std::optional<std::string> expect_json_equals;  // the value at that pointer, as JSON text
  // command: run by the agent of each node `command.on` selects, as declared (argv, no shell),
  // bounded by command.timeout (= timeout); its exit code and output are judged by the controller.
  Command command;
  int expect_exit = 0;
  std::string expect_output_contains;
  Mark mark;
};

struct Gates {
  Duration serve_timeout = std::chrono::minutes(30);
  bool health = true;
  bool models = true;
  bool chat = true;
  bool tool_call = true;
  bool json = true;
  std::optional<int> long_retrieval_tokens;  // the prompt length of the long-context gate
  // true: the answer must contain the needle hidden in that prompt (a trained model); false: the
  // prompt need only be served and answered (a model with random weights cannot retrieve anything).
  bool long_retrieval_require_needle = true;
  bool spec_metrics = false;
  std::optional<double> min_acceptance;  // accepted / drafted, when spec_metrics is on
  // A completion prompt of the drafter's kind (spec_prompt_tokens greedy tokens): the gate then
  // judges the counters' change over that request alone, not over the earlier gates' traffic
  // (chat questions a drafter trained on code and JSON rarely predicts). Empty: cumulative.
  std::string spec_prompt;
  int spec_prompt_tokens = 64;
  struct Bench {
    double min_tok_s = 0;
    int max_failures = 0;
    int concurrency = 1;
    int max_tokens = 400;
  };
  std::optional<Bench> bench;
  std::vector<CustomGate> custom;  // in manifest order, after the built-in gates
};

enum class DeadmanBackend { systemd, agent };

struct Deadman {
  Duration delay = std::chrono::minutes(70);
  DeadmanBackend backend = DeadmanBackend::systemd;
};

struct RollbackVerify {
  std::string url;  // GET must answer 200
  std::string expect_body_contains;
  Duration timeout = std::chrono::minutes(20);
};

struct Rollback {
  std::vector<Command> commands;
  RollbackVerify verify;
};

// stage: make the nodes' engine files equal to the source's, whole files only (issue 27). Each
// file lands beside its target, its SHA-256 is checked and it is renamed into place. The source:
// - head: the head's agent serves exactly the paths named here; every other node pulls them over
//   mutual TLS;
// - controller: tandemctl's machine holds them (under its --stage-root) and pushes them to every
//   node, the head included (pushed_source.hpp says how an agent still drives the landing).
struct Stage {
  enum class Item { binary, pins, model, drafter };
  enum class From { head, controller };
  From from = From::head;
  std::vector<Item> items;  // what is staged; default: every engine path the manifest names
  int parallel = 4;         // files in flight at once per node
  std::uint64_t chunk = 8ull << 20;  // bytes per request; resume restarts at a chunk boundary
  std::optional<std::uint64_t> rate_limit;  // bytes per second per node; unset: the fabric's speed
  // Files in a staged directory that the source does not have: listed always, removed (with a
  // backup, so undo puts them back) only when this is true.
  bool prune = false;
  // Bytes of backups that must be copies (a replaced file whose directory is on another file
  // system than the agent's state dir; hard links cost nothing). Checked before anything changes.
  std::uint64_t backup_budget = 8ull << 30;
  // Files staged from another path on the source (a build output to its installed name), each
  // optionally pinned: the source's copy must hash to `sha256` or nothing of it is served.
  struct File {
    std::string source;  // host path on the source node
    std::string target;  // host path on every other node
    std::string sha256;  // 64 lowercase hex, or empty
    Mark mark;
  };
  std::vector<File> files;
  Mark mark;
};
const char* to_string(Stage::Item i);

// One path the stage section makes equal: a file (the binary, a pin) or a directory (model,
// drafter). The source serves only these, and only files inside the directories.
struct StagedPath {
  std::string path;    // host path, the same on every node
  bool dir = false;
  std::string sha256;  // a pin's digest: the source's copy must have it too; empty: none
  std::string source;  // where the source node reads it (stage.files); empty: `path` itself
};

struct Manifest {
  std::string file;  // where it was read from, for messages
  // metadata.name, a DNS label (tandem/names.hpp). "bind" when not given: the name the agent's
  // dead-man has always fallen back to, so both sides name the state directory alike.
  std::string name = "bind";
  std::vector<Node> nodes;
  Fabric fabric;
  Engine engine;
  Hygiene hygiene;
  Gates gates;
  Deadman deadman;
  Rollback rollback;
  std::optional<Stage> stage;  // absent: nothing is copied; the operator makes the nodes equal

  const Node& head() const;                  // valid manifests have exactly one
  std::vector<const Node*> workers() const;  // in manifest order
  // Nodes in start order: workers first (an orphaned head hangs the rendezvous), head last.
  std::vector<const Node*> start_order() const;
  // What stage copies, in manifest order; empty without a stage section.
  std::vector<StagedPath> staged_paths() const;
  // Does a command's `on` select this node?
  bool selects(const Command& c, const Node& n) const;
};

struct LoadResult {
  std::optional<Manifest> manifest;  // set only when there are no errors
  Diagnostics errors;
  // The bytes that were parsed (empty when the file could not be read), so a caller that passes
  // the manifest on (the controller sends it to the agents) sends exactly what was validated.
  std::string text;
};

// The largest manifest read; the seed's bind is about 4 KiB.
inline constexpr std::uint64_t kMaxManifestBytes = 1024 * 1024;

// Parse and validate. Reports every problem at once; returns a manifest only if there are none.
// The text must be one YAML document of UTF-8 without control characters, tags or nesting
// deeper than 64.
LoadResult load_manifest_text(const std::string& text, const std::string& file_name);
// read_manifest_file, then load_manifest_text; a file that cannot be read is one error without
// a line.
LoadResult load_manifest_file(const std::string& path);
// The file's bytes, if it is a regular file of at most kMaxManifestBytes. Never blocks on a FIFO
// and never reads a device: the type and size are checked on the open descriptor before reading.
Result<std::string> read_manifest_file(const std::string& path);

const char* to_string(Role r);
const char* to_string(DeadmanBackend b);

}  // namespace tandem
