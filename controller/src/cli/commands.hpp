// Each verb group registers its subcommands on the app; main.cpp only assembles them.
#pragma once
#include <CLI/CLI.hpp>

namespace tandem::cli {
void add_manifest_commands(CLI::App& app);  // validate, plan, default-manifest
void add_pki_commands(CLI::App& app);       // pki init, pki show
void add_enroll_command(CLI::App& app);     // enroll
void add_bind_command(CLI::App& app);       // bind
void add_stage_command(CLI::App& app);      // stage
void add_status_commands(CLI::App& app);    // status, logs
void add_rollback_commands(CLI::App& app);  // rollback, disarm
void add_gates_commands(CLI::App& app);     // gates
void add_bench_commands(CLI::App& app);     // bench
void add_history_commands(CLI::App& app);   // history, report
}  // namespace tandem::cli
