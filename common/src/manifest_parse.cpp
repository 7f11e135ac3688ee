// YAML -> Manifest. Field-level checks (types, ranges, units, absolute paths) happen here as
// each key is read; checks that relate several fields live in manifest_validate.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <regex>

#include "manifest_readers.hpp"
#include "manifest_validate.hpp"
#include "tandem/manifest.hpp"
#include "tandem/names.hpp"
#include "tandem/utf8.hpp"
#include "yaml_guard.hpp"
#include "yaml_reader.hpp"

namespace tandem {
namespace {

using yaml::Context;
using yaml::MapReader;

const std::regex kHex64("^[0-9a-f]{64}$");
const std::regex kUser("^[a-z_][a-z0-9_-]{0,31}$");

// A loop, not std::regex: libstdc++'s regex recurses per character and overflows the stack on a
// long key (an explicit `? <300k characters>` key crashed the parser).
bool is_env_name(const std::string& k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0]))) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_') || static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// The first control character YAML does not allow in a stream (all of C0 but tab, LF and CR;
// DEL), or npos. A NUL would otherwise cut messages and paths short where it is quoted.
size_t control_char_at(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) return i;
  }
  return std::string::npos;
}

// 1-based line and column (in characters) of byte `offset`, for problems found before YAML.
Mark position_of(const std::string& text, size_t offset) {
  Mark m{1, 1};
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') m.line++, m.column = 1;
    else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++m.column;
  }
  return m;
}

// Bytes a YAML parser should never see: invalid UTF-8 (manifest text ends up in JSON, which must
// be valid UTF-8) and control characters. nullopt when the text is clean.
std::optional<Diagnostic> bad_bytes(const std::string& text, const std::string& file_name) {
  size_t bad = utf8::invalid_at(text);
  std::string what;
  char byte[8];
  if (bad != std::string::npos) {
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    what = std::string("the manifest is not valid UTF-8 (byte ") + byte + "); expected UTF-8 text";
  } else if ((bad = control_char_at(text)) != std::string::npos) {
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    what = text[bad] == '\0' ? std::string("the manifest contains a NUL byte; expected text")
                             : std::string("the manifest contains the control character ") + byte +
                                   "; expected text (printable characters, tabs and line breaks)";
  } else {
    return std::nullopt;
  }
  Mark at = position_of(text, bad);
  return Diagnostic{file_name, at.line, at.column, what};
}

std::string size_expectation() { return "expected at most " + std::to_string(kMaxManifestBytes) + " bytes (1 MiB)"; }

// Node and bind names become CNs, directory and unit names: one rule (tandem/names.hpp).
void check_label(Context& ctx, MapReader& r, const std::string& key, const std::string& value) {
  if (is_dns_label(value)) return;
  ctx.error(r.value(key), "'" + r.child_path(key) + "' " + (value.empty() ? "is empty" : "is '" + value + "'") +
                              "; " + kDnsLabelExpected);
}

void read_node(Context& ctx, const YAML::Node& yn, size_t i, Manifest& m) {
  Node node;
  const std::string path = "nodes[" + std::to_string(i) + "]";
  MapReader r(ctx, yn, path);
  node.mark = r.mark();
  if (!r.ok()) {
    // Keep a place-holder so counts (ranks vs tensor_parallel_size) stay true; its role is unknown.
    m.nodes.push_back(std::move(node));
    return;
  }
  if (r.str("name", node.name, true) && r.has("name")) check_label(ctx, r, "name", node.name);
  r.str("address", node.address, true);
  if (r.has("address") && node.address.empty()) ctx.error(r.value("address"), "'" + path + ".address' is empty");
  r.str("fabric_address", node.fabric_address);
  if (node.fabric_address.empty()) node.fabric_address = node.address;
  std::string role;
  if (r.one_of("role", role, {"head", "worker"}, true) && !role.empty())
    node.role = role == "head" ? Role::head : Role::worker;
  if (r.has("ssh")) {
    MapReader s(ctx, r.value("ssh"), r.child_path("ssh"), r.key_mark("ssh"));
    if (s.str("user", node.ssh_user) && s.has("user") && !std::regex_match(node.ssh_user, kUser))
      ctx.error(s.value("user"), "'" + s.child_path("user") + "' is '" + node.ssh_user + "'; expected a user name");
    s.port("port", node.ssh_port);
    s.finish();
  }
  if (r.has("agent")) {
    MapReader a(ctx, r.value("agent"), r.child_path("agent"), r.key_mark("agent"));
    a.port("port", node.agent_port);
    a.finish();
  }
  r.abs_path("root", node.root);
  r.finish();
  m.nodes.push_back(std::move(node));
}

void read_nodes(Context& ctx, MapReader& top, Manifest& m) {
  top.require("nodes");
  if (!top.has("nodes")) return;
  YAML::Node list = top.value("nodes");
  if (!list.IsSequence()) {
    ctx.error(list.IsNull() ? top.key_mark("nodes") : ctx.mark_of(list),
              "'nodes' must be a list of nodes, got " + std::string(yaml::kind_name(list)));
    ctx.failed("nodes");
    return;
  }
  if (list.size() == 0) {
    ctx.error(top.key_mark("nodes"), "'nodes' is empty; expected one head and zero or more workers");
    ctx.failed("nodes");
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) read_node(ctx, list[i], i, m);
}

}  // namespace

// One argv command for the agent to run. No shell: argv[0] must be an absolute path.
bool read_command(Context& ctx, const YAML::Node& yn, const std::string& path, Command& c,
                  const std::function<void(MapReader&)>& extra) {
  MapReader r(ctx, yn, path);
  if (!r.ok()) return false;
  c.mark = r.mark();
  r.str("on", c.on);
  r.require("run");
  if (r.has("run")) {
    YAML::Node run = r.value("run");
    if (!run.IsSequence() || run.size() == 0) {
      ctx.error(run.IsNull() ? r.key_mark("run") : ctx.mark_of(run),
                "'" + r.child_path("run") +
                    "' must be a non-empty argv list like [/usr/bin/docker, compose, down] (no shell)");
    } else {
      for (size_t i = 0; i < run.size(); ++i) {
        std::string arg, what = r.child_path("run") + "[" + std::to_string(i) + "]";
        bool ok = i == 0 ? yaml::as_abs_path(ctx, run[i], what, arg) : yaml::as_string(ctx, run[i], what, arg);
        if (ok) c.run.push_back(arg);
      }
    }
  }
  r.duration("timeout", c.timeout);
  if (extra) extra(r);
  r.finish();
  return true;
}

namespace {

void read_commands(Context& ctx, MapReader& parent, const std::string& key, std::vector<Command>& out,
                   bool required) {
  if (required) parent.require(key);
  if (!parent.has(key)) return;
  YAML::Node list = parent.value(key);
  if (!list.IsSequence()) {
    ctx.error(list.IsNull() ? parent.key_mark(key) : ctx.mark_of(list),
              "'" + parent.child_path(key) + "' must be a list of commands ({on, run, timeout}), got " +
                  yaml::kind_name(list));
    return;
  }
  if (required && list.size() == 0) ctx.error(list, "'" + parent.child_path(key) + "' is empty; expected at least one command");
  for (size_t i = 0; i < list.size(); ++i) {
    Command c;
    if (read_command(ctx, list[i], parent.child_path(key) + "[" + std::to_string(i) + "]", c)) out.push_back(c);
  }
}

void read_serve(Context& ctx, MapReader& engine, ServeFlags& s) {
  engine.require("serve");
  if (!engine.has("serve")) return;
  MapReader r(ctx, engine.value("serve"), "engine.serve", engine.key_mark("serve"));
  r.str("served_model_name", s.served_model_name);
  r.str("host", s.host);
  r.port("port", s.port, true);
  r.boolean("trust_remote_code", s.trust_remote_code);
  r.one_of("load_format", s.load_format, {"auto", "safetensors"});
  r.integer("tensor_parallel_size", s.tensor_parallel_size, 1, 64, true);
  r.number("gpu_memory_utilization", s.gpu_memory_utilization, 0.0, 1.0, true);
  r.integer("max_model_len", s.max_model_len, 1, 16777216);
  r.integer("max_num_seqs", s.max_num_seqs, 1, 4096);
  if (r.integer("block_size", s.block_size, 1, 65536) && s.block_size > 0 && r.has("block_size") &&
      s.block_size % 16 != 0)
    ctx.error(r.value("block_size"), "'engine.serve.block_size' is " + std::to_string(s.block_size) +
                                         "; expected a multiple of 16");
  r.one_of("moe_backend", s.moe_backend, {"auto", "marlin", "triton", "cutlass"});
  if (r.has("speculative_config")) {
    MapReader sc(ctx, r.value("speculative_config"), "engine.serve.speculative_config",
                 r.key_mark("speculative_config"));
    if (sc.ok()) {
      Speculative spec;
      sc.one_of("method", spec.method, {"dflash"}, true);
      sc.abs_path("model", spec.model, true);
      sc.integer("num_speculative_tokens", spec.num_speculative_tokens, 1, 63, true);
      sc.finish();
      s.speculative = spec;
    }
  }
  r.one_of("kv_cache_dtype", s.kv_cache_dtype, {"auto", "bfloat16", "fp8_e4m3"});
  if (r.size("kv_cache_memory", s.kv_cache_memory) && s.kv_cache_memory && *s.kv_cache_memory == 0)
    ctx.error(r.value("kv_cache_memory"), "'engine.serve.kv_cache_memory' must be more than zero bytes");
  r.boolean("enforce_eager", s.enforce_eager);
  r.abs_path("chat_template", s.chat_template);
  r.one_of("tool_call_parser", s.tool_call_parser, {"glm45", "glm47"});
  r.boolean("enable_auto_tool_choice", s.enable_auto_tool_choice);
  r.one_of("reasoning_parser", s.reasoning_parser, {"glm45"});
  if (r.has("default_chat_template_kwargs")) {
    YAML::Node kw = r.value("default_chat_template_kwargs");
    auto json = kw.IsMap() ? yaml::to_json_text(kw) : std::nullopt;
    if (!kw.IsMap())
      ctx.error(kw.IsNull() ? r.key_mark("default_chat_template_kwargs") : ctx.mark_of(kw),
                "'engine.serve.default_chat_template_kwargs' must be a map like {enable_thinking: false}, got " +
                    std::string(yaml::kind_name(kw)));
    else if (!json)
      ctx.error(kw, "'engine.serve.default_chat_template_kwargs' is nested too deeply or too large (or refers to "
                    "itself through an alias) or holds text that is not UTF-8; expected a small map like "
                    "{enable_thinking: false}");
    else
      s.default_chat_template_kwargs = *json;
  }
  r.one_of("distributed_executor_backend", s.distributed_executor_backend, {"mp"});
  r.one_of("device", s.device, {"cuda", "cpu"});
  r.str_list("extra_args", s.extra_args);
  r.finish();
}

void read_engine(Context& ctx, MapReader& top, Manifest& m) {
  top.require("engine");
  if (!top.has("engine")) return;
  Engine& e = m.engine;
  MapReader r(ctx, top.value("engine"), "engine", top.key_mark("engine"));
  if (!r.ok()) return;
  r.abs_path("binary", e.binary, true);
  r.abs_path("model_dir", e.model_dir, true);
  r.abs_path("drafter_dir", e.drafter_dir);
  if (r.str("run_user", e.run_user, true) && r.has("run_user") && !std::regex_match(e.run_user, kUser))
    ctx.error(r.value("run_user"), "'engine.run_user' is '" + e.run_user + "'; expected a user name");
  r.abs_path("cache_dir", e.cache_dir, true);
  if (r.has("pins")) {
    YAML::Node pins = r.value("pins");
    if (!pins.IsSequence()) {
      ctx.error(pins.IsNull() ? r.key_mark("pins") : ctx.mark_of(pins),
                "'engine.pins' must be a list of {path, sha256}, got " + std::string(yaml::kind_name(pins)));
    } else {
      for (size_t i = 0; i < pins.size(); ++i) {
        PinnedFile p;
        MapReader pr(ctx, pins[i], "engine.pins[" + std::to_string(i) + "]");
        if (!pr.ok()) continue;
        p.mark = pr.mark();
        pr.abs_path("path", p.path, true);
        if (pr.str("sha256", p.sha256) && pr.has("sha256") && !std::regex_match(p.sha256, kHex64))
          ctx.error(pr.value("sha256"), "'" + pr.child_path("sha256") +
                                            "' is not a SHA-256; expected 64 lowercase hex digits");
        pr.finish();
        m.engine.pins.push_back(p);
      }
    }
  }
  read_serve(ctx, r, e.serve);
  if (r.has("rendezvous")) {
    MapReader rv(ctx, r.value("rendezvous"), "engine.rendezvous", r.key_mark("rendezvous"));
    rv.port("port", e.rendezvous.port);
    rv.duration("timeout", e.rendezvous.timeout);
    rv.finish();
  }
  if (r.has("env")) {
    MapReader env(ctx, r.value("env"), "engine.env", r.key_mark("env"));
    if (env.ok()) {
      for (auto it = r.value("env").begin(); it != r.value("env").end(); ++it) {
        if (!it->first.IsScalar()) continue;  // reported by the MapReader
        std::string k = it->first.Scalar(), v;
        if (!is_env_name(k)) {
          env.has(k);  // declared: reported here, not again as an unknown key
          ctx.error(it->first, "'engine.env' key '" + k +
                                   "' is not an environment variable name; expected letters, digits and '_', "
                                   "not starting with a digit");
          continue;
        }
        if (yaml::as_string(ctx, env.value(k), "engine.env." + k, v)) e.env[k] = v;
      }
    }
    env.finish();
  }
  r.finish();
}

void read_hygiene(Context& ctx, MapReader& top, Hygiene& h) {
  if (!top.has("hygiene")) return;
  MapReader r(ctx, top.value("hygiene"), "hygiene", top.key_mark("hygiene"));
  if (!r.ok()) return;
  if (r.has("cron")) {
    MapReader c(ctx, r.value("cron"), "hygiene.cron", r.key_mark("cron"));
    c.str_list("patterns", h.cron_patterns);
    c.boolean("systemd_timers", h.cron_include_systemd_timers);
    c.finish();
  }
  if (r.has("stop")) {
    MapReader s(ctx, r.value("stop"), "hygiene.stop", r.key_mark("stop"));
    if (s.ok()) read_commands(ctx, s, "commands", h.stop, false);
    s.duration("port_dark_timeout", h.port_dark_timeout);
    s.finish();
  }
  if (r.has("shm")) {
    MapReader s(ctx, r.value("shm"), "hygiene.shm", r.key_mark("shm"));
    if (s.str_list("patterns", h.shm_patterns) && s.has("patterns")) {
      YAML::Node list = s.value("patterns");
      for (size_t i = 0; i < h.shm_patterns.size(); ++i) {
        const auto& p = h.shm_patterns[i];
        if (p.find('/') != std::string::npos || p == "*" || p.rfind("..", 0) == 0)
          ctx.error(list[i], "'hygiene.shm.patterns[" + std::to_string(i) + "]' is '" + p +
                                 "'; expected a file-name glob inside /dev/shm such as 'torch_*' "
                                 "(no '/', not '*' alone, not starting with '..')");
      }
    }
    s.finish();
  }
  if (r.has("page_cache")) {
    MapReader p(ctx, r.value("page_cache"), "hygiene.page_cache", r.key_mark("page_cache"));
    p.boolean("drop", h.drop_page_cache);
    p.size("min_mem_available", h.min_mem_available);
    p.finish();
  }
  if (r.has("cache_dir")) {
    MapReader c(ctx, r.value("cache_dir"), "hygiene.cache_dir", r.key_mark("cache_dir"));
    c.boolean("user_owned", h.cache_dir_user_owned);
    c.finish();
  }
  r.finish();
}

void read_gates(Context& ctx, MapReader& top, Gates& g) {
  if (!top.has("gates")) return;
  MapReader r(ctx, top.value("gates"), "gates", top.key_mark("gates"));
  if (!r.ok()) return;
  r.duration("serve_timeout", g.serve_timeout);
  r.boolean("health", g.health);
  r.boolean("models", g.models);
  r.boolean("chat", g.chat);
  r.boolean("tool_call", g.tool_call);
  r.boolean("json", g.json);
  if (r.has("long_retrieval")) {
    MapReader lr(ctx, r.value("long_retrieval"), "gates.long_retrieval", r.key_mark("long_retrieval"));
    int tokens = 0;
    if (lr.integer("context_tokens", tokens, 256, 16777216, true) && lr.has("context_tokens"))
      g.long_retrieval_tokens = tokens;
    lr.boolean("require_needle", g.long_retrieval_require_needle);
    lr.finish();
  }
  if (r.has("spec_metrics")) {
    YAML::Node sm = r.value("spec_metrics");
    if (sm.IsMap()) {
      MapReader s(ctx, sm, "gates.spec_metrics", r.key_mark("spec_metrics"));
      double acc = 0;
      if (s.number("min_acceptance", acc, 0.0, 1.0) && s.has("min_acceptance")) g.min_acceptance = acc;
      s.str("prompt", g.spec_prompt);
      s.integer("max_tokens", g.spec_prompt_tokens, 1, 4096);
      s.finish();
      g.spec_metrics = true;
    } else {
      r.boolean("spec_metrics", g.spec_metrics);
    }
  }
  if (r.has("bench")) {
    MapReader b(ctx, r.value("bench"), "gates.bench", r.key_mark("bench"));
    if (b.ok()) {
      Gates::Bench bench;
      b.number("min_tok_s", bench.min_tok_s, 0.0, 1e7);
      b.integer("max_failures", bench.max_failures, 0, 1000000);
      b.integer("concurrency", bench.concurrency, 1, 64);
      b.integer("max_tokens", bench.max_tokens, 1, 1000000);
      b.finish();
      g.bench = bench;
    }
  }
  read_custom_gates(ctx, r, g.custom);
  r.finish();
}

void read_deadman(Context& ctx, MapReader& top, Deadman& d) {
  top.require("deadman");
  if (!top.has("deadman")) return;
  MapReader r(ctx, top.value("deadman"), "deadman", top.key_mark("deadman"));
  r.require("delay");
  r.duration("delay", d.delay);
  std::string backend;
  if (r.one_of("backend", backend, {"systemd", "agent"}) && !backend.empty())
    d.backend = backend == "systemd" ? DeadmanBackend::systemd : DeadmanBackend::agent;
  r.finish();
}

void read_rollback(Context& ctx, MapReader& top, Rollback& rb) {
  top.require("rollback");
  if (!top.has("rollback")) return;
  MapReader r(ctx, top.value("rollback"), "rollback", top.key_mark("rollback"));
  if (!r.ok()) return;
  read_commands(ctx, r, "commands", rb.commands, true);
  r.require("verify");
  if (r.has("verify")) {
    MapReader v(ctx, r.value("verify"), "rollback.verify", r.key_mark("verify"));
    v.url("url", rb.verify.url, true);
    v.str("expect_body_contains", rb.verify.expect_body_contains);
    v.duration("timeout", rb.verify.timeout);
    v.finish();
  }
  r.finish();
}

void read_stage(Context& ctx, MapReader& top, Manifest& m) {
  if (!top.has("stage")) return;
  MapReader r(ctx, top.value("stage"), "stage", top.key_mark("stage"));
  if (!r.ok()) return;
  Stage st;
  st.mark = r.mark();
  std::string from = "head";
  r.one_of("from", from, {"head", "controller"});
  st.from = from == "controller" ? Stage::From::controller : Stage::From::head;
  std::vector<std::string> items;
  if (r.str_list("items", items, true) && r.has("items")) {
    YAML::Node list = r.value("items");
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string& it = items[i];
      Stage::Item item;
      if (it == "binary") item = Stage::Item::binary;
      else if (it == "pins") item = Stage::Item::pins;
      else if (it == "model") item = Stage::Item::model;
      else if (it == "drafter") item = Stage::Item::drafter;
      else {
        ctx.error(list[i], "'stage.items[" + std::to_string(i) + "]' is '" + it +
                               "'; expected one of binary, pins, model, drafter");
        continue;
      }
      if (std::find(st.items.begin(), st.items.end(), item) != st.items.end()) {
        ctx.error(list[i], "'stage.items[" + std::to_string(i) + "]' names '" + it + "' twice");
        continue;
      }
      st.items.push_back(item);
    }
  } else if (!r.has("items")) {
    st.items = {Stage::Item::binary, Stage::Item::pins, Stage::Item::model, Stage::Item::drafter};
  }
  r.integer("parallel", st.parallel, 1, 64);
  std::optional<std::uint64_t> chunk;
  if (r.size("chunk", chunk) && chunk) {
    if (*chunk < (64u << 10) || *chunk > (64u << 20))
      ctx.error(r.value("chunk"), "'stage.chunk' is " + format_size(*chunk) + "; expected 64KiB to 64MiB");
    else
      st.chunk = *chunk;
  }
  if (r.size("rate_limit", st.rate_limit) && st.rate_limit && *st.rate_limit < 4096)
    ctx.error(r.value("rate_limit"), "'stage.rate_limit' is " + format_size(*st.rate_limit) +
                                         " per second; expected at least 4KiB (or no rate_limit for the fabric's speed)");
  r.boolean("prune", st.prune);
  std::optional<std::uint64_t> budget;
  if (r.size("backup_budget", budget) && budget) st.backup_budget = *budget;
  if (r.has("files")) {
    YAML::Node files = r.value("files");
    if (!files.IsSequence()) {
      ctx.error(files.IsNull() ? r.key_mark("files") : ctx.mark_of(files),
                "'stage.files' must be a list of {source, target, sha256}, got " + std::string(yaml::kind_name(files)));
    } else {
      for (size_t i = 0; i < files.size(); ++i) {
        Stage::File f;
        MapReader fr(ctx, files[i], "stage.files[" + std::to_string(i) + "]");
        if (!fr.ok()) continue;
        f.mark = fr.mark();
        fr.abs_path("source", f.source, true);
        fr.abs_path("target", f.target, true);
        if (fr.str("sha256", f.sha256) && fr.has("sha256") && !std::regex_match(f.sha256, kHex64))
          ctx.error(fr.value("sha256"), "'" + fr.child_path("sha256") + "' is not a SHA-256; expected 64 lowercase hex digits");
        fr.finish();
        for (const auto& other : st.files)
          if (!f.target.empty() && other.target == f.target)
            ctx.error(fr.value("target"), "'" + fr.child_path("target") + "' is " + f.target +
                                              ", already the target of an earlier stage.files entry; expected each target once");
        st.files.push_back(f);
      }
    }
  }
  r.finish();
  m.stage = st;
}

}  // namespace

LoadResult load_manifest_text(const std::string& text, const std::string& file_name) {
  LoadResult result;
  result.text = text;
  // The same cap as for files, for text that arrives another way (the agent gets it over HTTPS).
  if (text.size() > kMaxManifestBytes) {
    result.errors.push_back(Diagnostic{file_name, 0, 0, "the manifest is " + std::to_string(text.size()) + " bytes; " +
                                                            size_expectation()});
    return result;
  }
  if (auto bad = bad_bytes(text, file_name)) {
    result.errors.push_back(*bad);
    return result;
  }
  // A second document, deep nesting, tags or a syntax error: nothing else is trustworthy.
  result.errors = yaml::check_structure(text, file_name);
  if (!result.errors.empty()) return result;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // check_structure ran the same parser over the same text; kept so no exception can escape.
    result.errors.push_back(Diagnostic{file_name, e.mark.line >= 0 ? e.mark.line + 1 : 0,
                                       e.mark.column >= 0 ? e.mark.column + 1 : 0, "YAML syntax error: " + e.msg});
    return result;
  }
  if (!root.IsDefined() || root.IsNull()) {
    result.errors.push_back(Diagnostic{file_name, 1, 1, "the manifest is empty; expected a map with apiVersion: tandem/v1"});
    return result;
  }
  Context ctx(file_name, result.errors);
  Manifest m;
  m.file = file_name;
  MapReader top(ctx, root, "", Mark{1, 1});
  if (!top.ok()) return result;

  std::string api;
  top.require("apiVersion");
  if (top.str("apiVersion", api) && top.has("apiVersion") && api != "tandem/v1")
    ctx.error(top.value("apiVersion"), "apiVersion is '" + api + "'; this tandemctl reads tandem/v1");
  std::string kind;
  top.require("kind");
  if (top.str("kind", kind) && top.has("kind") && kind != "Bind")
    ctx.error(top.value("kind"), "kind is '" + kind + "'; expected Bind");
  if (top.has("metadata")) {
    MapReader md(ctx, top.value("metadata"), "metadata", top.key_mark("metadata"));
    if (md.str("name", m.name) && md.has("name")) check_label(ctx, md, "name", m.name);
    md.finish();
  }
  read_nodes(ctx, top, m);
  if (top.has("fabric")) {
    MapReader f(ctx, top.value("fabric"), "fabric", top.key_mark("fabric"));
    f.str("interface", m.fabric.interface);
    f.str("subnet", m.fabric.subnet);
    f.finish();
  }
  read_engine(ctx, top, m);
  read_hygiene(ctx, top, m.hygiene);
  read_gates(ctx, top, m.gates);
  read_deadman(ctx, top, m.deadman);
  read_rollback(ctx, top, m.rollback);
  read_stage(ctx, top, m);
  top.finish();

  validate_manifest(ctx, m);

  std::stable_sort(result.errors.begin(), result.errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (result.errors.empty()) result.manifest = std::move(m);
  return result;
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes the descriptor on every path out of read_manifest_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::string> read_manifest_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It changes nothing
  // for the regular files that get past the check below.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) return Error{"cannot open the manifest: " + std::string(std::strerror(errno))};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Error{"cannot stat the manifest: " + std::string(std::strerror(errno))};
  if (!S_ISREG(st.st_mode))
    return Error{std::string("the manifest is ") + file_kind(st.st_mode) + ", not a regular file; expected a YAML file"};
  if (static_cast<std::uint64_t>(st.st_size) > kMaxManifestBytes)
    return Error{"the manifest is " + std::to_string(st.st_size) + " bytes; " + size_expectation()};
  // Read to the end, not to st_size: the file may change under us. One byte past the cap says it
  // grew too large.
  std::string text;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{"cannot read the manifest: " + std::string(std::strerror(errno))};
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxManifestBytes) return Error{"the manifest grew past the limit while it was read; " + size_expectation()};
  }
  return text;
}

LoadResult load_manifest_file(const std::string& path) {
  auto text = read_manifest_file(path);
  if (!text) {
    LoadResult r;
    r.errors.push_back(Diagnostic{path, 0, 0, text.error().message});
    return r;
  }
  return load_manifest_text(*text, path);
}

}  // namespace tandem
