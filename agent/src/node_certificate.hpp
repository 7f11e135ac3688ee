// tandemd serves as one node; its certificate must say so. The controller checks the CN when it
// connects, but an agent started with another node's certificate (a copy-paste in an env file)
// would then fail every bind with a TLS error far from the cause: it refuses to start instead.
#pragma once
#include <string>

#include "tandem/net/pki.hpp"
#include "tandem/result.hpp"

namespace tandem::agentd {

// The node certificate in `pki` for `node`: its CN is `node`, it is for serverAuth, within its
// validity period, and its key in `pki` belongs to it.
Status check_node_certificate(const net::PkiLayout& pki, const std::string& node);

}  // namespace tandem::agentd
