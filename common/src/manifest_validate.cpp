#include "manifest_validate.hpp"

#include <arpa/inet.h>

#include <map>
#include <set>

namespace tandem {
namespace {

Mark at(const yaml::Context& ctx, const std::string& path, Mark fallback = {1, 1}) {
  auto it = ctx.marks.find(path);
  return it == ctx.marks.end() ? fallback : it->second;
}

std::string node_path(size_t i, const std::string& key) { return "nodes[" + std::to_string(i) + "]." + key; }

// IPv4 CIDR membership; returns nullopt when `subnet` is not an IPv4 CIDR.
std::optional<bool> in_subnet(const std::string& addr, const std::string& subnet) {
  auto slash = subnet.find('/');
  if (slash == std::string::npos) return std::nullopt;
  in_addr net{}, a{};
  if (inet_pton(AF_INET, subnet.substr(0, slash).c_str(), &net) != 1) return std::nullopt;
  int bits = 0;
  try {
    size_t used = 0;
    bits = std::stoi(subnet.substr(slash + 1), &used);
    if (used != subnet.size() - slash - 1) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  if (bits < 0 || bits > 32) return std::nullopt;
  if (inet_pton(AF_INET, addr.c_str(), &a) != 1) return false;
  uint32_t mask = bits == 0 ? 0u : ~0u << (32 - bits);
  return (ntohl(a.s_addr) & mask) == (ntohl(net.s_addr) & mask);
}

void check_nodes(yaml::Context& ctx, const Manifest& m) {
  if (m.nodes.empty()) return;  // missing, empty or not a list: reported while reading
  // A node whose role could not be read (not a map, no role, a bad role) is neither head nor worker.
  bool roles_known = true;
  std::map<std::string, size_t> names, addresses, fabric;
  const Node* head = nullptr;
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const Node& n = m.nodes[i];
    if (!n.name.empty()) {
      auto [it, fresh] = names.emplace(n.name, i);
      if (!fresh)
        ctx.error(at(ctx, node_path(i, "name"), n.mark),
                  "duplicate node name '" + n.name + "' (also nodes[" + std::to_string(it->second) + "])");
    }
    if (!n.address.empty()) {
      auto [it, fresh] = addresses.emplace(n.address, i);
      if (!fresh)
        ctx.error(at(ctx, node_path(i, "address"), n.mark),
                  "duplicate node address '" + n.address + "' (also nodes[" + std::to_string(it->second) +
                      "]); every node needs its own address");
    }
    if (!n.fabric_address.empty() && n.fabric_address != n.address) {
      auto [it, fresh] = fabric.emplace(n.fabric_address, i);
      if (!fresh)
        ctx.error(at(ctx, node_path(i, "fabric_address"), n.mark),
                  "duplicate fabric address '" + n.fabric_address + "' (also nodes[" + std::to_string(it->second) + "])");
    }
    if (!ctx.marks.count(node_path(i, "role"))) {
      roles_known = false;
    } else if (n.role == Role::head) {
      if (head)
        ctx.error(at(ctx, node_path(i, "role"), n.mark),
                  "a second head '" + n.name + "'; '" + head->name + "' is already the head (expected exactly one)");
      else
        head = &n;
    }
  }
  Mark list = at(ctx, "nodes");
  if (!head && roles_known) ctx.error(list, "no node has role: head; expected exactly one head");
  // No worker is no error: a one-node bind (head alone, tensor_parallel_size 1) is legitimate.

  const int tp = m.engine.serve.tensor_parallel_size;
  if (ctx.marks.count("engine.serve.tensor_parallel_size") && tp != static_cast<int>(m.nodes.size()))
    ctx.error(at(ctx, "engine.serve.tensor_parallel_size"),
              "'engine.serve.tensor_parallel_size' is " + std::to_string(tp) + " but there are " +
                  std::to_string(m.nodes.size()) + " nodes; tandem runs one rank per node, expected " +
                  std::to_string(m.nodes.size()));

  if (!m.fabric.subnet.empty()) {
    if (!in_subnet("0.0.0.0", m.fabric.subnet)) {
      ctx.error(at(ctx, "fabric.subnet"),
                "'fabric.subnet' is '" + m.fabric.subnet + "'; expected an IPv4 CIDR like 10.0.0.0/24");
    } else {
      for (size_t i = 0; i < m.nodes.size(); ++i) {
        const Node& n = m.nodes[i];
        if (n.fabric_address.empty()) continue;  // no address: reported while reading
        std::string key = ctx.marks.count(node_path(i, "fabric_address")) ? "fabric_address" : "address";
        in_addr ignored{};
        if (inet_pton(AF_INET, n.fabric_address.c_str(), &ignored) != 1) {
          ctx.error(at(ctx, node_path(i, key), n.mark),
                    "node '" + n.name + "' fabric address '" + n.fabric_address +
                        "' is not an IPv4 address, so it cannot be checked against fabric.subnet " + m.fabric.subnet +
                        "; expected an IPv4 address (set nodes[" + std::to_string(i) + "].fabric_address)");
        } else if (in_subnet(n.fabric_address, m.fabric.subnet) == false) {
          ctx.error(at(ctx, node_path(i, key), n.mark),
                    "node '" + n.name + "' fabric address '" + n.fabric_address + "' is outside fabric.subnet " +
                        m.fabric.subnet + "; the rendezvous would not use the fabric");
        }
      }
    }
  }
  if (head) {
    if (head->agent_port == m.engine.serve.port && ctx.marks.count("engine.serve.port"))
      ctx.error(at(ctx, "engine.serve.port"), "'engine.serve.port' " + std::to_string(m.engine.serve.port) +
                                                  " is also the head's agent port; expected two different ports");
  }
}

void check_engine(yaml::Context& ctx, Manifest& m) {
  Engine& e = m.engine;
  const auto& spec = e.serve.speculative;
  if (spec && !spec->model.empty()) {
    if (e.drafter_dir.empty()) {
      e.drafter_dir = spec->model;
    } else if (e.drafter_dir != spec->model) {
      ctx.error(at(ctx, "engine.drafter_dir"), "'engine.drafter_dir' is '" + e.drafter_dir +
                                                   "' but speculative_config.model is '" + spec->model +
                                                   "'; expected the same directory");
    }
  } else if (!e.drafter_dir.empty() && ctx.marks.count("engine.serve")) {
    ctx.error(at(ctx, "engine.drafter_dir"),
              "'engine.drafter_dir' is set but engine.serve.speculative_config is missing; expected both or neither");
  }
  if (ctx.marks.count("engine.rendezvous.port") || ctx.marks.count("engine.serve.port")) {
    if (e.rendezvous.port == e.serve.port)
      ctx.error(at(ctx, "engine.rendezvous.port", at(ctx, "engine.serve.port")),
                "the rendezvous port and the serving port are both " + std::to_string(e.serve.port) +
                    "; expected two different ports");
  }
  std::map<std::string, size_t> pins;
  for (size_t i = 0; i < e.pins.size(); ++i) {
    auto [it, fresh] = pins.emplace(e.pins[i].path, i);
    if (!fresh)
      ctx.error(e.pins[i].mark, "'" + e.pins[i].path + "' is pinned twice (also engine.pins[" +
                                    std::to_string(it->second) + "])");
  }
  if (m.gates.spec_metrics && !spec && ctx.marks.count("gates.spec_metrics"))
    ctx.error(at(ctx, "gates.spec_metrics"),
              "'gates.spec_metrics' is on but engine.serve.speculative_config is missing; there would be no "
              "speculative metrics to check");
  if (e.serve.enable_auto_tool_choice && e.serve.tool_call_parser.empty())
    ctx.error(at(ctx, "engine.serve.enable_auto_tool_choice"),
              "'engine.serve.enable_auto_tool_choice' needs engine.serve.tool_call_parser (glm45 or glm47)");
  // The tool_call gate is on by default, so an unset gate counts too (unless the values involved
  // were unreadable and already reported).
  if (m.gates.tool_call && ctx.marks.count("engine.serve") && !e.serve.enable_auto_tool_choice &&
      !ctx.bad.count("engine.serve.enable_auto_tool_choice") && !ctx.bad.count("gates") &&
      !ctx.bad.count("gates.tool_call")) {
    if (ctx.marks.count("gates.tool_call"))
      ctx.error(at(ctx, "gates.tool_call"),
                "'gates.tool_call' is on but engine.serve.enable_auto_tool_choice is not; the gate would fail");
    else
      ctx.error(at(ctx, "engine.serve.enable_auto_tool_choice", at(ctx, "engine.serve")),
                "'gates.tool_call' is on by default but engine.serve.enable_auto_tool_choice is not; the gate "
                "would fail. Expected enable_auto_tool_choice: true (with a tool_call_parser), or gates.tool_call: false");
  }
}

// The long-context gate's prompt plus its answer must fit the context the engine will allow.
void check_gates(yaml::Context& ctx, const Manifest& m) {
  constexpr int kAnswerRoom = 64;  // tokens the gate lets the model answer with
  const int max_len = m.engine.serve.max_model_len;
  if (!m.gates.long_retrieval_tokens || max_len <= 0) return;
  if (*m.gates.long_retrieval_tokens + kAnswerRoom > max_len)
    ctx.error(at(ctx, "gates.long_retrieval.context_tokens", at(ctx, "gates.long_retrieval")),
              "'gates.long_retrieval.context_tokens' is " + std::to_string(*m.gates.long_retrieval_tokens) +
                  " but engine.serve.max_model_len is " + std::to_string(max_len) +
                  "; the prompt and a " + std::to_string(kAnswerRoom) + "-token answer must fit. Expected at most " +
                  std::to_string(max_len - kAnswerRoom));
}

void check_commands(yaml::Context& ctx, const Manifest& m, const std::vector<Command>& cmds) {
  std::set<std::string> names;
  for (const auto& n : m.nodes) names.insert(n.name);
  for (const auto& c : cmds) {
    if (c.on == "all" || c.on == "head" || c.on == "worker" || names.count(c.on)) continue;
    ctx.error(c.mark, "command runs on '" + c.on + "', which is not a node; expected all, head, worker or a node name");
  }
}

void check_custom_gates(yaml::Context& ctx, const Manifest& m) {
  std::set<std::string> seen;
  std::vector<Command> commands;
  for (const auto& g : m.gates.custom) {
    if (!g.name.empty() && !seen.insert(g.name).second)
      ctx.error(g.mark, "custom gate name '" + g.name + "' is used twice; expected each gates.custom[].name once");
    if (g.kind == CustomGate::Kind::command) commands.push_back(g.command);
  }
  check_commands(ctx, m, commands);
}

void check_deadman(yaml::Context& ctx, const Manifest& m) {
  if (!ctx.marks.count("deadman.delay")) return;
  // The dead-man must outlive a healthy bind: stop + rendezvous + serving + gates.
  Duration needed = m.engine.rendezvous.timeout + m.gates.serve_timeout + m.hygiene.port_dark_timeout;
  if (m.deadman.delay <= needed)
    ctx.error(at(ctx, "deadman.delay"),
              "'deadman.delay' is " + format_duration(m.deadman.delay) +
                  ", not longer than a healthy bind may take (port_dark_timeout + rendezvous.timeout + "
                  "gates.serve_timeout = " + format_duration(needed) +
                  "); the dead-man would roll back a good bind. Expected more than " + format_duration(needed));
}

// Every item the stage section names must name something, so a typo'd engine key does not turn
// into "staged nothing".
void check_stage(yaml::Context& ctx, const Manifest& m) {
  if (!m.stage || ctx.bad.count("stage")) return;
  for (Stage::Item i : m.stage->items) {
    const bool empty = (i == Stage::Item::binary && m.engine.binary.empty()) ||
                       (i == Stage::Item::pins && m.engine.pins.empty()) ||
                       (i == Stage::Item::model && m.engine.model_dir.empty()) ||
                       (i == Stage::Item::drafter && m.engine.drafter_dir.empty());
    if (!empty || !ctx.marks.count("stage.items")) continue;
    const std::string key = i == Stage::Item::binary ? "engine.binary"
                            : i == Stage::Item::pins ? "engine.pins"
                            : i == Stage::Item::model ? "engine.model_dir"
                                                      : "engine.drafter_dir (or speculative_config.model)";
    ctx.error(at(ctx, "stage.items"), std::string("'stage.items' names ") + to_string(i) + " but " + key +
                                          " is not set; expected only items the engine section names");
  }
  // A stage.files target that an item stages too would be written twice, from two sources.
  Manifest items_only = m;
  items_only.stage->files.clear();
  const auto item_paths = items_only.staged_paths();
  for (size_t k = 0; k < m.stage->files.size(); ++k) {
    const Stage::File& f = m.stage->files[k];
    for (const auto& p : item_paths)
      if (!f.target.empty() && (f.target == p.path || (p.dir && f.target.starts_with(p.path + "/"))))
        ctx.error(f.mark, "'stage.files[" + std::to_string(k) + "].target' is " + f.target + ", which stage.items already stages (" +
                              p.path + (p.dir ? "/*" : "") + "); expected a path no item stages");
  }
}

}  // namespace

void validate_manifest(yaml::Context& ctx, Manifest& m) {
  check_nodes(ctx, m);
  check_engine(ctx, m);
  check_gates(ctx, m);
  check_commands(ctx, m, m.hygiene.stop);
  check_commands(ctx, m, m.rollback.commands);
  check_custom_gates(ctx, m);
  check_deadman(ctx, m);
  check_stage(ctx, m);
}

}  // namespace tandem
