#include "node_certificate.hpp"

#include <chrono>

namespace tandem::agentd {

Status check_node_certificate(const net::PkiLayout& pki, const std::string& node) {
  const auto path = pki.node_cert(node);
  auto info = net::inspect_certificate_file(path);
  if (!info) return Error{path.string() + ": " + info.error().message};
  const net::CertInfo& c = info.value();
  if (c.subject_cn != node)
    return Error{path.string() + ": the certificate is for '" + c.subject_cn + "', not this node '" + node +
                 "' (--node); the controller would refuse it. Install nodes/" + node + ".pem from `tandemctl pki init`"};
  if (!c.server_auth)
    return Error{path.string() + ": the certificate is not for serverAuth (a controller certificate?); an agent needs "
                                 "its node certificate"};
  const auto now = std::chrono::system_clock::now();
  if (now < c.not_before) return Error{path.string() + ": the certificate is not valid yet (check the clock)"};
  if (now > c.not_after) return Error{path.string() + ": the certificate has expired; issue a new one"};
  return {};
}

}  // namespace tandem::agentd
