#include "tandem/serve_args.hpp"

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace tandem {

int node_rank(const Manifest& m, const Node& n) {
  if (n.role == Role::head) return 0;
  int rank = 1;
  for (const Node* w : m.workers()) {
    if (w == &n || w->name == n.name) return rank;
    ++rank;
  }
  return -1;
}

namespace {
// The shortest text that reads back as exactly `v` ("0.85", not "%g"'s six digits: 0.8512345 stays).
std::string fmt_double(double v) {
  char buf[40];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Whole seconds when exact ("300s"), else milliseconds, so no part of the timeout is dropped.
std::string fmt_timeout(Duration d) {
  auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + "s" : std::to_string(ms) + "ms";
}
}  // namespace

std::vector<std::string> serve_argv(const Manifest& m, const Node& n) {
  const ServeFlags& s = m.engine.serve;
  const bool head = n.role == Role::head;
  std::vector<std::string> a{m.engine.binary, m.engine.model_dir};
  auto flag = [&](const char* name, const std::string& value) {
    if (!value.empty()) {
      a.emplace_back(name);
      a.push_back(value);
    }
  };
  auto num = [&](const char* name, long long value) {
    if (value > 0) flag(name, std::to_string(value));
  };
  auto on = [&](const char* name, bool value) {
    if (value) a.emplace_back(name);
  };
  // The worker is the head minus public serving: its --host/--port answer only GET /health, on
  // its own fabric address, which is how its agent sees that it is ready for the head.
  if (head) {
    flag("--served-model-name", s.served_model_name);
    flag("--host", s.host);
  } else {
    flag("--host", n.fabric_address.empty() ? n.address : n.fabric_address);
  }
  num("--port", s.port);
  on("--trust-remote-code", s.trust_remote_code);
  flag("--load-format", s.load_format);
  num("--tensor-parallel-size", s.tensor_parallel_size);
  flag("--gpu-memory-utilization", fmt_double(s.gpu_memory_utilization));
  num("--max-model-len", s.max_model_len);
  num("--max-num-seqs", s.max_num_seqs);
  num("--block-size", s.block_size);
  flag("--moe-backend", s.moe_backend);
  if (s.speculative) {
    nlohmann::ordered_json spec{{"method", s.speculative->method},
                                {"model", s.speculative->model},
                                {"num_speculative_tokens", s.speculative->num_speculative_tokens}};
    flag("--speculative-config", spec.dump());
  }
  if (s.kv_cache_dtype != "auto") flag("--kv-cache-dtype", s.kv_cache_dtype);
  if (s.kv_cache_memory) flag("--kv-cache-memory", std::to_string(*s.kv_cache_memory));
  on("--enforce-eager", s.enforce_eager);
  flag("--chat-template", s.chat_template);
  flag("--tool-call-parser", s.tool_call_parser);
  on("--enable-auto-tool-choice", s.enable_auto_tool_choice);
  flag("--reasoning-parser", s.reasoning_parser);
  flag("--default-chat-template-kwargs", s.default_chat_template_kwargs);
  flag("--distributed-executor-backend", s.distributed_executor_backend);
  if (s.device != "cuda") flag("--device", s.device);
  num("--nnodes", static_cast<long long>(m.nodes.size()));
  a.emplace_back("--node-rank");
  a.push_back(std::to_string(node_rank(m, n)));
  flag("--master-addr", m.head().fabric_address);
  num("--master-port", m.engine.rendezvous.port);
  flag("--rendezvous-timeout", fmt_timeout(m.engine.rendezvous.timeout));
  on("--headless", !head);
  for (const auto& e : s.extra_args) a.push_back(e);
  return a;
}

std::vector<std::pair<std::string, std::string>> serve_env(const Manifest& m) {
  std::vector<std::pair<std::string, std::string>> env;
  // Compiled kernels, autotune results and the like go under the user-owned cache dir
  // (the seed's launch died on a root-owned /var/cache path).
  env.emplace_back("XDG_CACHE_HOME", m.engine.cache_dir);
  if (!m.fabric.interface.empty()) {
    env.emplace_back("NCCL_SOCKET_IFNAME", m.fabric.interface);
    env.emplace_back("GLOO_SOCKET_IFNAME", m.fabric.interface);
  }
  for (const auto& [k, v] : m.engine.env) {
    bool replaced = false;
    for (auto& kv : env)
      if (kv.first == k) kv.second = v, replaced = true;
    if (!replaced) env.emplace_back(k, v);
  }
  return env;
}

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) out += ' ';
    const std::string& s = argv[i];
    bool plain = !s.empty();
    for (char c : s)
      if (!(isalnum(static_cast<unsigned char>(c)) || std::string_view("-_./:=,@%+").find(c) != std::string_view::npos))
        plain = false;
    if (plain) {
      out += s;
    } else {
      out += '\'';
      for (char c : s) {
        if (c == '\'') out += "'\\''";
        else out += c;
      }
      out += '\'';
    }
  }
  return out;
}

}  // namespace tandem
