// tandem-serve's command line: the vLLM flags the seed recipe uses, so a recipe carries over.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "serve_config.hpp"

namespace tandem::engine {

// Registers every flag on `app`, bound to `cfg`.
void add_serve_flags(CLI::App& app, ServeConfig& cfg);

// Cross-flag checks after parsing (JSON flags parse, rank < nnodes, ...). Empty when valid.
std::vector<std::string> check_serve_config(const ServeConfig& cfg);

}  // namespace tandem::engine
