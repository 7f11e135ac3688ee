// How a bench run is shown and kept: the table at the end, --output json (which --compare reads
// back), the comparison of two runs with ratios, and the SVG chart.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "bench.hpp"
#include "tandem/result.hpp"

namespace tandem::bench {

nlohmann::ordered_json to_json(const Report& r);
// Reads a report written by to_json (for --compare); says what is missing when it is not one.
Result<Report> from_json(const nlohmann::json& j, const std::string& source);

// One row per (concurrency, fixture), then spec acceptance per fixture and the failures by reason.
std::string render_table(const Report& r);

// This run beside another: for every cell both have, the two values and this/other.
nlohmann::ordered_json compare_json(const Report& mine, const Report& other);
std::string render_compare(const Report& mine, const Report& other);

// tok/s against concurrency, one line per fixture: aggregate tok/s on the left, the per-request
// median decode tok/s on the right.
std::string render_svg(const Report& r);

}  // namespace tandem::bench
