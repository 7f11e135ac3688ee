// tandem-serve: the bundled inference server. This build parses and checks the full vLLM-style
// command line; the model runtime (issue 5) is not built yet, and the program says so.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/serve_flags.hpp"
#include "tandem/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tandem-serve: OpenAI-compatible GLM inference server (TP over NCCL, paged KV, DFlash).\n"
               "Takes the vLLM flags of a `vllm serve` recipe so an operator's recipe carries over."};
  app.set_version_flag("--version", std::string("tandem-serve ") + tandem::kVersion);
  tandem::engine::ServeConfig cfg;
  tandem::engine::add_serve_flags(app, cfg);
  bool print_config = false;
  app.add_flag("--print-config", print_config, "Print the parsed configuration as JSON and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto errors = tandem::engine::check_serve_config(cfg);
  for (const auto& e : errors) std::cerr << "tandem-serve: " << e << "\n";
  if (!errors.empty()) return 2;
  if (print_config) {
    std::cout << cfg.to_json().dump(2) << "\n";
    return 0;
  }
  std::cerr << "tandem-serve: the model runtime is not built in this version (see README: not built yet); "
               "the command line above is valid.\n";
  return 3;
}
