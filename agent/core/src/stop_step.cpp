#include "tandem/agent/stop_step.hpp"

#include <sstream>

#include "tandem/agent/command.hpp"
#include "tandem/agent/port_probe.hpp"

namespace tandem::agent {

json gpu_memory_evidence() {
  auto tool = find_executable("nvidia-smi");
  if (!tool) return {{"tool", nullptr}, {"note", "no GPU tool found (nvidia-smi not in PATH)"}};
  auto r = run_command({*tool, "--query-gpu=memory.used", "--format=csv,noheader,nounits"}, std::chrono::seconds(20));
  if (!r) return {{"tool", *tool}, {"note", r.error().text()}};
  if (!r->success()) return {{"tool", *tool}, {"note", "nvidia-smi failed"}, {"result", r->to_json()}};
  json used = json::array();
  std::istringstream in(r->output_tail);
  for (std::string line; std::getline(in, line);) {
    try {
      used.push_back(std::stoll(line));
    } catch (const std::exception&) {
      // not a number (a warning line); keep the raw text in the evidence instead
    }
  }
  return {{"tool", *tool}, {"memory_used_mib", used}, {"raw", r->output_tail}};
}

Result<json> StopStep::check(const StepContext& ctx) {
  auto p = probe_port(ctx.root, port_);
  if (!p) return p.error();
  json cmds = json::array();
  for (const auto& c : commands_) cmds.push_back(c.run);
  return json{{"commands", cmds},
              {"port", {{"port", port_}, {"dark", !p->listening}, {"method", p->method}, {"listeners", p->listeners}}},
              {"gpu", gpu_memory_evidence()}};
}

Result<json> StopStep::plan(const StepContext&) {
  json cmds = json::array();
  for (const auto& c : commands_) {
    if (c.run.empty() || c.run[0].empty() || c.run[0][0] != '/')
      return plain_error(c.run.empty() ? "" : c.run[0], "refused: stop command argv[0] must be an absolute path");
    cmds.push_back({{"argv", c.run}, {"timeout_ms", c.timeout.count()}});
  }
  return json{{"commands", cmds}, {"port", port_}, {"port_dark_timeout_ms", timeout_.count()}};
}

Result<json> StopStep::apply(const StepContext& ctx, const json& intent) {
  json results = json::array();
  std::size_t failed = 0;
  // Run every declared command even if one fails: each stops a different piece of the old lane.
  for (const auto& c : intent.at("commands")) {
    auto r = run_command(c.at("argv").get<std::vector<std::string>>(), Duration(c.at("timeout_ms").get<std::int64_t>()));
    if (!r) {
      results.push_back({{"argv", c.at("argv")}, {"ok", false}, {"error", to_json(r.error())}});
      ++failed;
      continue;
    }
    if (!r->success()) ++failed;
    results.push_back(r->to_json());
  }
  json ev{{"commands", results}};
  auto port = wait_port_dark(ctx.root, port_, timeout_);
  ev["port"] = port ? *port : evidence(port.error());
  ev["gpu"] = gpu_memory_evidence();
  if (failed > 0 || !port) {
    Error e = failed > 0 ? plain_error("", std::to_string(failed) + " stop command(s) failed or timed out") : port.error();
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> StopStep::verify(const StepContext& ctx, const json&, const json&) {
  auto port = wait_port_dark(ctx.root, port_, Duration(0));
  if (!port) return port.error();
  return json{{"port", *port}, {"gpu", gpu_memory_evidence()}};
}

Result<json> StopStep::undo(const StepContext&, const json&) {
  return json{{"undone", false}, {"why", "the old lane is restarted by the manifest's rollback lane, not by undoing stop"}};
}

}  // namespace tandem::agent
