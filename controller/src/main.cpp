// tandemctl: the operator's CLI. Verbs are the operator's verbs; `plan` shows exactly what
// `bind` will do.
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "tandem/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "tandemctl: bring a two-node tensor-parallel LLM server up, prove it, and fall back safely.\n\n"
      "Start with `tandemctl plan` to see every step a bind would run, node by node.\n"
      "A manifest is validated in full before anything is touched; errors are reported as\n"
      "file:line:col: what is wrong, what was expected."};
  app.set_version_flag("--version", std::string("tandemctl ") + tandem::kVersion);
  app.require_subcommand(1);
  tandem::cli::add_manifest_commands(app);
  tandem::cli::add_pki_commands(app);
  tandem::cli::add_enroll_command(app);
  tandem::cli::add_bind_command(app);
  tandem::cli::add_status_commands(app);
  tandem::cli::add_rollback_commands(app);
  tandem::cli::add_gates_commands(app);
  tandem::cli::add_bench_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
