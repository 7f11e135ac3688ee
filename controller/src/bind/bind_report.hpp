// The bind report: what ran where, in which order, how long each step took, its evidence, the
// hashes and the gate results, and the rollback if there was one. JSON for scripts, Markdown and
// a self-contained HTML page (bind_report_html.hpp) for people, in
// <state dir>/<bind name>/reports/<bind id>.{json,md,html}, and the bench gate's chart beside them
// as <bind id>.bench.svg.
#pragma once
#include <string>

#include "bind_context.hpp"

namespace tandem::ctl {

struct ReportFiles {
  std::string markdown, json, html;
  std::string bench_svg;  // <bind id>.bench.svg when the bench gate ran, else empty
};

// `result`: bound | rolled_back | rollback_failed. `writing_step`: the report.write step's index
// (shown as done in the report it writes), or 0.
json build_report(const BindContext& ctx, const std::string& result, int writing_step);
std::string render_report_markdown(const json& report);
Result<ReportFiles> write_report(BindContext& ctx, const std::string& result, int writing_step = 0);

}  // namespace tandem::ctl
