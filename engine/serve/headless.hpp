// A headless worker rank (--headless): load this rank's slice of the model, answer GET /health on
// --host:--port (that is how the agent knows the rank is ready for the head), join rank 0 and run
// the forwards it announces until it shuts down, goes silent or the process is told to stop.
#pragma once
#include <csignal>
#include <functional>
#include <string>

#include "http_options.hpp"
#include "serve_config.hpp"

namespace tandem::engine::serve {

// `signals` are blocked in every thread and taken here with sigwait: SIGTERM/SIGINT stop the rank,
// SIGUSR1 is how the worker loop says it ended. Returns the process exit code.
// `name_settings`: how the rank's HTTP refusals name a setting (http_options.hpp).
int run_headless(const ServeConfig& cfg, const sigset_t& signals, const std::function<void(const std::string&)>& log,
                 const NameSettings& name_settings = {});

}  // namespace tandem::engine::serve
