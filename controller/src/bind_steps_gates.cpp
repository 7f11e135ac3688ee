// The gate steps: the gates library (gates.hpp) puts every gate the manifest turns on to the live
// endpoint once, at the first gate step; each gate step then reports its own gate's result. A
// failed gate fails its step (and so the bind, which rolls back) with the gate's one-line detail.
#include "bind_steps.hpp"
#include "gates.hpp"

namespace tandem::ctl {

StepOutcome run_gate(BindContext& ctx, const Step& s) {
  const std::string name = s.action.substr(std::string("gate.").size());
  if (!ctx.gates_ran) {
    gates::GateOptions opts;
    opts.on_start = [&ctx](const std::string& g) { ctx.progress.note("controller", "gate " + g + " running"); };
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
