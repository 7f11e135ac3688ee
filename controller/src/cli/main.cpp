// tandemctl: the operator's CLI. Verbs are the operator's verbs; `plan` shows exactly what
// `bind` will do.
#include <CLI/CLI.hpp>

#include "cli_conventions.hpp"
#include "commands.hpp"
#include "logging.hpp"

int main(int argc, char** argv) {
  if (auto rc = tandem::cli::handle_version(argc, argv, "tandemctl")) return *rc;
  CLI::App app{
      "tandemctl: bring a two-node tensor-parallel LLM server up, prove it, and fall back safely.\n\n"
      "Start with `tandemctl plan` to see every step a bind would run, node by node.\n"
      "A manifest is validated in full before anything is touched; errors are reported as\n"
      "file:line:col: what is wrong, what was expected.",
      "tandemctl"};
  app.footer(
      "Exit status: 0 success; 1 invalid input (a manifest error, an unreadable file); 2 usage error (unknown\n"
      "command or flag, a bad value); 3 the operation ran and failed (a gate, a bind, an agent that did not answer).");
  tandem::cli::add_version_flag(app);
  tandem::cli::LogOptions log;
  tandem::cli::add_log_flags(app, log);
  app.require_subcommand(1);
  // The logger is in place before any verb's callback runs (callbacks run inside parse).
  app.parse_complete_callback([&log] { tandem::cli::setup_logging("tandemctl", log); });
  tandem::cli::add_manifest_commands(app);
  tandem::cli::add_pki_commands(app);
  tandem::cli::add_enroll_command(app);
  tandem::cli::add_bind_command(app);
  tandem::cli::add_stage_command(app);
  tandem::cli::add_status_commands(app);
  tandem::cli::add_rollback_commands(app);
  tandem::cli::add_gates_commands(app);
  tandem::cli::add_bench_commands(app);
  tandem::cli::add_history_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tandem::cli::usage_exit(app, e, argc, argv);
  }
  return 0;
}
