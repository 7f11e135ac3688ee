// `tandemctl pki init DIR`: the CA, the controller's client certificate, one server cert per node.
#include <openssl/x509v3.h>

#include <set>
#include <system_error>

#include "openssl_util.hpp"
#include "tandem/net/pki.hpp"

namespace fs = std::filesystem;

namespace tandem::net {
namespace {

// Names become file names and CNs, so keep them to what a hostname may hold.
Status check_name(const std::string& what, const std::string& name) {
  if (name.empty()) return Error{what + " name is empty"};
  if (name.front() == '.' || name.front() == '-')
    return Error{what + " name '" + name + "' must start with a letter or digit"};
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_';
    if (!ok) return Error{what + " name '" + name + "' may hold only letters, digits, '-', '.', '_'"};
  }
  return {};
}

Status check_names(const std::string& controller, const std::vector<NodeSpec>& nodes) {
  if (Status s = check_name("controller", controller); !s) return s;
  std::set<std::string> seen;
  for (const auto& node : nodes) {
    if (Status s = check_name("node", node.name); !s) return s;
    if (node.name == controller)
      return Error{"node '" + node.name + "' has the controller's name; CNs must be distinct"};
    if (!seen.insert(node.name).second) return Error{"node '" + node.name + "' is listed twice"};
  }
  return {};
}

bool is_ip_literal(const std::string& text) {
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(text.c_str());
  const bool is_ip = ip != nullptr;
  ASN1_OCTET_STRING_free(ip);
  return is_ip;
}

LeafSpec node_spec(const NodeSpec& node) {
  // clientAuth too: a worker's agent pulls staged files from the head's agent with its node certificate.
  LeafSpec spec{.common_name = node.name, .dns_names = {node.name}, .server_auth = true, .client_auth = true};
  for (const auto& addr : node.addresses) {
    auto& list = is_ip_literal(addr) ? spec.ip_addresses : spec.dns_names;
    if (addr != node.name) list.push_back(addr);
  }
  return spec;
}

std::vector<fs::path> outputs(const PkiLayout& pki, const std::vector<NodeSpec>& nodes) {
  std::vector<fs::path> paths{pki.ca_cert(), pki.ca_key(), pki.controller_cert(),
                              pki.controller_key()};
  for (const auto& node : nodes) {
    paths.push_back(pki.node_cert(node.name));
    paths.push_back(pki.node_key(node.name));
  }
  return paths;
}

Status make_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return {};
  fs::create_directories(dir, ec);
  if (!ec) fs::permissions(dir, fs::perms::owner_all, ec);  // it holds private keys
  if (ec) return Error{dir.string() + ": cannot create directory: " + ec.message()};
  return {};
}

}  // namespace

Result<PkiLayout> init_cluster_pki(const fs::path& dir, const std::string& controller_name,
                                   const std::vector<NodeSpec>& nodes, Overwrite overwrite) {
  const PkiLayout pki{dir};
  if (Status s = check_names(controller_name, nodes); !s) return s.error();
  if (overwrite == Overwrite::no) {
    for (const auto& path : outputs(pki, nodes))
      if (fs::exists(path))
        return Error{path.string() + " already exists; refusing to overwrite the cluster PKI "
                     "(a new CA cuts off every enrolled node). Ask for overwrite to replace it"};
  }
  if (Status s = make_dir(dir); !s) return s.error();
  if (Status s = make_dir(dir / "nodes"); !s) return s.error();

  auto ca = make_ca();
  if (!ca) return ca.error();
  if (Status s = write_credential(*ca, pki.ca_cert(), pki.ca_key(), overwrite); !s)
    return s.error();

  // The controller only ever connects; nodes only ever serve. Separate usages mean a stolen node
  // key cannot pose as the controller to the other nodes.
  auto ctl = issue_certificate(
      *ca, {.common_name = controller_name, .dns_names = {controller_name}, .client_auth = true});
  if (!ctl) return ctl.error();
  if (Status s = write_credential(*ctl, pki.controller_cert(), pki.controller_key(), overwrite); !s)
    return s.error();

  for (const auto& node : nodes) {
    auto cred = issue_certificate(*ca, node_spec(node));
    if (!cred) return cred.error();
    if (Status s = write_credential(*cred, pki.node_cert(node.name), pki.node_key(node.name),
                                    overwrite);
        !s)
      return s.error();
  }
  return pki;
}

}  // namespace tandem::net
