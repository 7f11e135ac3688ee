// Readiness is proven from outside the engine: a TCP port that accepts a connection.
#pragma once
#include <string>

#include "tandem/result.hpp"
#include "tandem/units.hpp"

namespace tandem::supervise {

// true if host:port accepts a connection within `timeout`, false if refused or timed out; an
// error only when the host does not resolve. 0.0.0.0 / :: (listen-anywhere) probe loopback.
Result<bool> port_accepts(const std::string& host, int port, Duration timeout);

}  // namespace tandem::supervise
