// The vLLM flags tandem-serve takes so that a `vllm serve` recipe runs unchanged, but that change
// nothing here. Each one given on the command line is named at start-up, so nobody tunes a knob
// that is not connected.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/serve_flags.hpp"

namespace tandem::engine {

// One line per accepted-but-ignored flag that `app` saw, saying why it has no effect.
std::vector<std::string> ignored_flag_notes(const CLI::App& app, const ServeConfig& cfg);

}  // namespace tandem::engine
