// Runs a bind: exactly the plan's steps, in order, each journaled before and after. Steps the
// journal already has as done are skipped (a resumed bind); on the first failure the plan's
// on_failure runs (rollback_runner) and the run ends with a report either way.
#pragma once
#include "bind_context.hpp"

namespace tandem::ctl {

struct BindResult {
  std::string result;  // bound | rolled_back | rollback_failed | failed_unchanged (failed in preflight)
  json failed_step;    // {index, node, action, error} or null
  std::vector<std::string> rollback_problems;
  std::string report_markdown, report_json, report_html;
  bool ok() const { return result == "bound"; }
};

// `ctx.run` must hold this run (a fresh bind.begin, or the unfinished run being resumed).
BindResult run_bind(BindContext& ctx);

}  // namespace tandem::ctl
