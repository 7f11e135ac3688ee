#include "bind_runner.hpp"

#include "bind_report.hpp"
#include "fault_pause.hpp"
#include "rollback_runner.hpp"

namespace tandem::ctl {
namespace {

using Clock = std::chrono::steady_clock;

BindResult finish(BindContext& ctx, BindResult r, bool write_report_now) {
  if (write_report_now) {
    auto files = write_report(ctx, r.result);
    if (files) {
      r.report_markdown = files->markdown;
      r.report_json = files->json;
      r.report_html = files->html;
    } else {
      r.rollback_problems.push_back("report: " + files.error().message);
    }
  } else if (!ctx.run.report.empty()) {
    r.report_markdown = ctx.run.report;
    r.report_json = ctx.run.report.substr(0, ctx.run.report.size() - 3) + ".json";
    r.report_html = ctx.run.report.substr(0, ctx.run.report.size() - 3) + ".html";
  }
  (void)ctx.record({{"event", "bind.end"}, {"result", r.result}});
  return r;
}

// Preflight only reads (and stores the manifest): a bind that failed there changed nothing.
bool changed_anything(const BindContext& ctx) {
  for (const auto& [index, rec] : ctx.run.steps)
    if (index > 0 && index <= static_cast<int>(ctx.plan.steps.size()) &&
        ctx.plan.steps[static_cast<size_t>(index - 1)].phase != "preflight")
      return true;
  return false;
}

BindResult roll_back(BindContext& ctx, json failed) {
  BindResult r;
  r.failed_step = std::move(failed);
  if (!changed_anything(ctx) && !ctx.run.rollback_begun) {
    r.result = "failed_unchanged";
    return finish(ctx, r, true);
  }
  RollbackResult rb = run_rollback(ctx, RollbackSource::bind_failure);
  r.result = rb.ok ? "rolled_back" : "rollback_failed";
  r.rollback_problems = rb.problems;
  return finish(ctx, r, true);
}

}  // namespace

BindResult run_bind(BindContext& ctx) {
  if (ctx.run.rollback_begun) {
    ctx.progress.line("resuming the rollback of bind " + ctx.run.bind_id + " (" + ctx.run.rollback_reason + ")");
    json failed = nullptr;
    for (const auto& [index, rec] : ctx.run.steps)
      if (rec.failed && index > 0 && index <= static_cast<int>(ctx.plan.steps.size())) {
        const Step& s = ctx.plan.steps[static_cast<size_t>(index - 1)];
        failed = {{"index", index}, {"node", s.node}, {"action", s.id()}, {"error", rec.error}};
      }
    return roll_back(ctx, failed);
  }
  bool asked = changed_anything(ctx);  // a resumed bind past preflight was agreed to already
  for (const Step& s : ctx.plan.steps) {
    auto it = ctx.run.steps.find(s.index);
    if (it != ctx.run.steps.end() && it->second.done) {
      ctx.progress.skipped(s.index, s.node, s.id(), "");
      continue;
    }
    if (!asked && s.phase != "preflight") {
      asked = true;
      if (ctx.confirm_outage && !ctx.confirm_outage()) {
        ctx.progress.line("not confirmed: nothing was changed on any node (preflight only reads)");
        BindResult r;
        r.result = "aborted";
        return finish(ctx, r, true);
      }
    }
    if (auto st = ctx.record({{"event", "step.begin"}, {"index", s.index}, {"node", s.node}, {"action", s.id()},
                              {"op_id", ctx.op_for_step(s.index)}});
        !st)
      return roll_back(ctx, {{"index", s.index}, {"node", s.node}, {"action", s.id()}, {"error", st.error().message}});
    ctx.progress.begin(s.index, s.node, s.id(), s.summary);
    fault_pause(ctx.bind_dir, "before:" + std::to_string(s.index));
    const auto t0 = Clock::now();
    StepOutcome o = run_step(ctx, s);
    fault_pause(ctx.bind_dir, "after:" + std::to_string(s.index));
    const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    if (o.ok) {
      if (auto st = ctx.record({{"event", "step.done"}, {"index", s.index}, {"evidence", o.evidence}, {"note", o.note}, {"ms", ms}}); !st)
        return roll_back(ctx, {{"index", s.index}, {"node", s.node}, {"action", s.id()}, {"error", st.error().message}});
      ctx.progress.done(s.index, s.node, s.id(), o.note, ms);
      continue;
    }
    ctx.progress.failed(s.index, s.node, s.id(), o.error);
    (void)ctx.record({{"event", "step.failed"}, {"index", s.index}, {"error", o.error}, {"evidence", o.evidence}, {"ms", ms}});
    if (changed_anything(ctx))
      (void)ctx.record({{"event", "rollback.begin"}, {"reason", "step " + std::to_string(s.index) + " " + s.id() + " failed on " + s.node}});
    return roll_back(ctx, {{"index", s.index}, {"node", s.node}, {"action", s.id()}, {"error", o.error}});
  }
  BindResult r;
  r.result = "bound";
  return finish(ctx, r, false);
}

}  // namespace tandem::ctl
