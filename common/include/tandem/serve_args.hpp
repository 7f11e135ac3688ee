// The engine command line for one rank, built from the manifest. The agent runs exactly this
// argv, `tandemctl plan` prints it, and tandem-serve parses it (tests check all three agree).
#pragma once
#include <string>
#include <vector>

#include "tandem/manifest.hpp"

namespace tandem {

int node_rank(const Manifest& m, const Node& n);  // head 0, workers 1.. in manifest order

std::vector<std::string> serve_argv(const Manifest& m, const Node& n);

// Environment for a rank: manifest engine.env plus the fabric interface for NCCL/Gloo.
std::vector<std::pair<std::string, std::string>> serve_env(const Manifest& m);

// Quote an argv for display in a POSIX shell (only for showing; nothing runs through a shell).
std::string shell_quote(const std::vector<std::string>& argv);

}  // namespace tandem
