// What every tandemctl verb shares: how a manifest is named on the command line, loaded, and
// how its errors are reported (text for people, JSON for scripts).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "tandem/manifest.hpp"

namespace tandem::cli {

constexpr int kExitInvalid = 1;  // the manifest (or other input) is wrong
constexpr int kExitFailed = 3;   // the operation ran and failed

struct ManifestArg {
  std::string path;             // empty: the embedded default
  std::string output = "text";  // text | json
};

// Adds the positional MANIFEST and -o/--output to a verb.
void add_manifest_arg(CLI::App* cmd, ManifestArg& arg);
void add_output_option(CLI::App* cmd, std::string& output);

LoadResult load(const ManifestArg& arg);
std::string display_name(const ManifestArg& arg);
// Prints the errors and returns kExitInvalid.
int report_errors(const LoadResult& r, const std::string& output);

}  // namespace tandem::cli
