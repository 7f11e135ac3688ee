// One logger for each program: spdlog's default logger on stderr, its level from -v (repeatable:
// debug, then trace) or --log-level, and its lines "<time> <program> <level>: <message>", or
// one JSON object per line with --log-format json (for journald or a log shipper).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace tandem::cli {

struct LogOptions {
  std::string level = "info";  // trace | debug | info | warn | error | off
  int verbose = 0;             // each -v lowers the level one step below `level`
  std::string format = "text"; // text | json
};

// Adds -v/--verbose, --log-level and --log-format to `app` (top level: they apply to every verb).
void add_log_flags(CLI::App& app, LogOptions& o);
// Installs the logger; call after parsing, before anything logs.
void setup_logging(const std::string& program, const LogOptions& o);

}  // namespace tandem::cli
