#include "cli_common.hpp"

#include <iostream>
#include <nlohmann/json.hpp>

#include "plan/embedded_manifest.hpp"

namespace tandem::cli {

void add_output_option(CLI::App* cmd, std::string& output) {
  cmd->add_option("-o,--output", output, "Output format: text for people, json for scripts")
      ->check(CLI::IsMember({"text", "json"}));
}

void add_manifest_arg(CLI::App* cmd, ManifestArg& arg) {
  cmd->add_option("manifest", arg.path,
                  "Bind manifest (YAML, apiVersion tandem/v1). Omitted: the embedded default, a two-rank "
                  "bind on this machine (see `tandemctl default-manifest`).");
  // No CLI11 file check: a missing file is reported like every other manifest error (exit 1).
  add_output_option(cmd, arg.output);
}

LoadResult load(const ManifestArg& arg) {
  if (arg.path.empty()) return load_manifest_text(embedded_local_manifest(), display_name(arg));
  return load_manifest_file(arg.path);
}

std::string display_name(const ManifestArg& arg) { return arg.path.empty() ? "<embedded local.yaml>" : arg.path; }

int report_errors(const LoadResult& r, const std::string& output) {
  if (output == "json") {
    auto arr = nlohmann::ordered_json::array();
    for (const auto& d : r.errors)
      arr.push_back({{"file", d.file}, {"line", d.line}, {"column", d.column}, {"message", d.message}});
    // The file name comes from the command line and need not be UTF-8: replace such bytes
    // rather than throw (the manifest's own text is checked for UTF-8 before it gets here).
    std::cout << nlohmann::ordered_json{{"valid", false}, {"errors", arr}}.dump(
                     2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
              << "\n";
  } else {
    std::cerr << format_diagnostics(r.errors);
    std::cerr << r.errors.size() << (r.errors.size() == 1 ? " error" : " errors") << "; nothing was changed.\n";
  }
  return kExitInvalid;
}

}  // namespace tandem::cli
