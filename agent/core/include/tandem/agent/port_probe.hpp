// Is anything listening on a TCP port? Read /proc/net/tcp and /proc/net/tcp6 under the node root
// (state 0A = LISTEN): that sees listeners on every address, needs no connection, and in a
// sandbox the root's own copies of those files stand in for the kernel's. Only when neither
// file exists under the root do we fall back to connecting to 127.0.0.1 and ::1.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/agent/node_root.hpp"
#include "tandem/units.hpp"

namespace tandem::agent {

struct PortState {
  bool listening = false;
  std::string method;                  // "proc_net_tcp" | "connect"
  std::vector<std::string> listeners;  // "0.0.0.0:8888", "[::]:8888" (proc method only)
};

// Listening sockets on `port` in /proc/net/tcp{,6}-format text.
std::vector<std::string> listeners_in_proc_net(const std::string& text, int port, bool v6);

Result<PortState> probe_port(const NodeRoot& root, int port);

// Polls until nothing listens or `timeout` passes. Evidence: {"port","dark","method","waited_ms","listeners"}.
Result<nlohmann::json> wait_port_dark(const NodeRoot& root, int port, Duration timeout);

}  // namespace tandem::agent
