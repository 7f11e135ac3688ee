// The HTTP server's options from tandem-serve's flags: one place, for rank 0's API and a
// worker's /health alike, so both carry the same limits against slow and greedy clients.
#pragma once
#include <functional>
#include <string>

#include "http_server.hpp"
#include "serve_config.hpp"

namespace tandem::engine::serve {

// `cfg` has passed check_serve_config (its durations and sizes parse).
api::HttpServerOptions http_options(const ServeConfig& cfg, unsigned threads,
                                    std::function<void(const std::string&)> log);

}  // namespace tandem::engine::serve
