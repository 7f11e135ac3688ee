// The bind report as one self-contained HTML page: inline CSS and SVG, no script, and a content
// security policy that forbids every fetch, so it opens the same from a state dir, a mail
// attachment or an air-gapped laptop. It shows the summary, the timeline per node (Gantt), the
// engine's start-up phases per rank, each node's dead-man arm / disarm times, the gates with what
// came back, the hash table across ranks, every step's evidence, the rollback, and the bench chart.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::ctl {

// `report`: build_report's JSON (bind_report.hpp). `bench_svg`: the bench gate's chart, or "".
std::string render_report_html(const nlohmann::json& report, const std::string& bench_svg);

}  // namespace tandem::ctl
