// Running a manifest-declared command: argv only (no shell), absolute argv[0], its own process
// group so a timeout kills everything it started, output captured (last bytes kept).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/units.hpp"

namespace tandem::agent {

struct CommandResult {
  std::vector<std::string> argv;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the terminating signal, 0 when it exited
  bool timed_out = false;
  std::int64_t duration_ms = 0;
  std::string output_tail;  // stdout and stderr interleaved, last `tail_bytes`
  bool success() const { return !timed_out && signal == 0 && exit_code == 0; }
  nlohmann::json to_json() const;
};

// Errors only when the command could not be started; a non-zero exit is a result.
Result<CommandResult> run_command(const std::vector<std::string>& argv, Duration timeout, std::size_t tail_bytes = 4096);

// First executable `name` in $PATH (or the default PATH), for tools like nvidia-smi.
std::optional<std::string> find_executable(const std::string& name);

}  // namespace tandem::agent
