// tandemd: the node agent. In this version it checks a manifest the way the controller will send
// it; the HTTPS API, hygiene steps and dead-man are not built yet (see README).
#include <CLI/CLI.hpp>
#include <iostream>

#include "tandem/manifest.hpp"
#include "tandem/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tandemd: the tandem node agent (hygiene checklist, engine rank supervision, dead-man)."};
  app.set_version_flag("--version", std::string("tandemd ") + tandem::kVersion);
  std::string manifest;
  app.add_option("--check-manifest", manifest, "Validate a manifest as the agent would and exit")
      ->check(CLI::ExistingFile)->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto r = tandem::load_manifest_file(manifest);
  if (!r.manifest) {
    std::cerr << tandem::format_diagnostics(r.errors);
    return 1;
  }
  std::cout << manifest << ": valid\n";
  return 0;
}
