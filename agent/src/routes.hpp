// The agent's HTTP API: each route maps one request to one Daemon operation.
#pragma once
#include "daemon.hpp"
#include "tandem/net/router.hpp"

namespace tandem::agentd {
net::Router make_router(Daemon& d);
}  // namespace tandem::agentd
