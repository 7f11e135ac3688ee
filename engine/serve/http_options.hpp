// The HTTP server's options from tandem-serve's flags: one place, for rank 0's API and a
// worker's /health alike, so both carry the same limits against slow and greedy clients.
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "http_server.hpp"
#include "serve_config.hpp"

namespace tandem::engine::serve {

// How a message's `setting` reads to the operator (the command line's flag names; see
// api::HttpServerOptions::name_settings). Empty: the field names stay.
using NameSettings = std::function<std::string(std::string_view)>;

// `cfg` has passed check_serve_config (its durations and sizes parse).
api::HttpServerOptions http_options(const ServeConfig& cfg, unsigned threads,
                                    std::function<void(const std::string&)> log, NameSettings name_settings = {});

}  // namespace tandem::engine::serve
