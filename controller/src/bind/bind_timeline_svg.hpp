// The bind report's charts as inline SVG (no script, no external font): the steps as a Gantt
// chart, one row per node (the rollback's tasks on rows of their own after a failure), and each
// rank's engine start-up phases as one stacked bar. Every bar carries its step's data in
// attributes (data-index, data-node, data-status, data-start-ms, data-end-ms) so a test can hold
// the drawing against the JSON report it was drawn from.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::ctl {

// `report` is build_report's JSON: steps[] with started_ms / ended_ms, rollback.tasks[], deadman{}.
// Steps that never started have no bar. Returns "" when no step has a start time.
std::string render_timeline_svg(const nlohmann::json& report);

// `startup` is one rank's /health "startup" object ({"phases": [{phase, status, ms, ...}]}).
// Phases that are "n/a" or "deferred" are named under the bar, not drawn.
std::string render_startup_svg(const nlohmann::json& startup);

}  // namespace tandem::ctl
