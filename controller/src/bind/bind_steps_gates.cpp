// The gate steps: the gates library (gates.hpp) puts every gate the manifest turns on to the live
// endpoint once, at the first gate step; each gate step then reports its own gate's result. A
// failed gate fails its step (and so the bind, which rolls back) with the gate's one-line detail.
#include "bind_steps.hpp"
#include "gates/gates.hpp"

namespace tandem::ctl {
namespace {

// A command gate on every node it names, through that node's agent (which runs only the argv the
// manifest declares, bounded by its timeout): {node: outcome}.
Result<json> run_command_gate(BindContext& ctx, const CustomGate& c) {
  json out = json::object();
  const Millis wait = std::chrono::duration_cast<Millis>(c.command.timeout) + std::chrono::seconds(30);
  for (const Node* n : ctx.m.start_order()) {
    if (!ctx.m.selects(c.command, *n)) continue;
    AgentReply r = ctx.agent(n->name).gate_run(c.name, wait);
    if (!r.ok) return Error{r.error};
    out[n->name] = r.body.value("outcome", json::object());
  }
  return out;
}

}  // namespace

StepOutcome run_gate(BindContext& ctx, const Step& s) {
  const std::string& name = s.gate;
  if (!ctx.gates_ran) {
    gates::GateOptions opts;
    opts.on_start = [&ctx](const std::string& g) { ctx.progress.note("controller", "gate " + g + " running"); };
    opts.run_command = [&ctx](const CustomGate& c) { return run_command_gate(ctx, c); };
    auto report = gates::run_gates(
        ctx.m, gates::endpoint_url(ctx.m),
        [&ctx](const gates::GateResult& r) {
          ctx.progress.note("controller", "gate " + r.name + (r.passed ? " passed: " : " FAILED: ") + r.detail);
        },
        opts);
    if (!report) return StepOutcome::failure(report.error().message);
    for (const auto& g : report->gates)
      ctx.gate_results[g.name] = {{"passed", g.passed}, {"detail", g.detail}, {"seconds", g.seconds}, {"evidence", g.evidence}};
    ctx.gates_ran = true;
  }
  auto it = ctx.gate_results.find(name);
  if (it == ctx.gate_results.end())
    return StepOutcome::failure("the gate runner did not run gate '" + name + "' (plan and gates are out of step)");
  const json& g = it->second;
  char secs[32];
  std::snprintf(secs, sizeof secs, " (%.2f s)", g.value("seconds", 0.0));
  if (!g.value("passed", false)) return StepOutcome::failure("gate " + name + " failed: " + g.value("detail", ""), g);
  return StepOutcome::success(g, g.value("detail", "") + secs);
}

}  // namespace tandem::ctl
