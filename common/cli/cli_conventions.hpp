// The command-line conventions all three programs keep:
//   --version        "PROGRAM VERSION (commit C, BUILD TYPE[, CUDA ...])"; with -o json (or
//                    --output json, or --json) the same as one JSON object. Taken before CLI11
//                    parses, so it works with or without a verb and whatever else is required.
//   exit status 2    every usage error (unknown command or flag, a bad or missing value), never
//                    CLI11's internal codes; an unknown command gets "did you mean".
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::cli {

constexpr int kExitUsage = 2;

// Lists --version in the help text (the flag itself is handled by handle_version).
void add_version_flag(CLI::App& app);
// When argv asks for --version: prints it to stdout and returns 0 (the exit status).
std::optional<int> handle_version(int argc, const char* const* argv, std::string_view program, bool cuda = false);
// The exit status for a CLI11 parse error: 0 after --help (printed here), else the error on
// stderr with a pointer to --help, and kExitUsage.
int usage_exit(CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv);
// "unknown command 'plann'; did you mean 'plan'?" when argv names a verb `app` does not have
// (at any depth: "unknown command 'innit' for 'tandemctl pki'; ..."); nullopt when every verb is known.
std::optional<std::string> unknown_command(const CLI::App& app, int argc, const char* const* argv);

}  // namespace tandem::cli
