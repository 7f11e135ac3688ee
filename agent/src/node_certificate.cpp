#include "node_certificate.hpp"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace tandem::agentd {
namespace {

// OpenSSL's own check says only "key values mismatch"; this one names both files.
Status check_key_matches(const std::filesystem::path& cert_path, const std::filesystem::path& key_path) {
  auto open = [](const std::filesystem::path& p) { return std::unique_ptr<FILE, int (*)(FILE*)>(std::fopen(p.c_str(), "r"), &std::fclose); };
  auto cert_file = open(cert_path);
  auto key_file = open(key_path);
  if (!key_file) return Error{key_path.string() + ": cannot be read (the node's private key)"};
  if (!cert_file) return Error{cert_path.string() + ": cannot be read"};
  std::unique_ptr<X509, void (*)(X509*)> cert(PEM_read_X509(cert_file.get(), nullptr, nullptr, nullptr), &X509_free);
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key(PEM_read_PrivateKey(key_file.get(), nullptr, nullptr, nullptr),
                                                     &EVP_PKEY_free);
  if (!cert) return Error{cert_path.string() + ": not a PEM certificate"};
  if (!key) return Error{key_path.string() + ": not a PEM private key (or it is encrypted)"};
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return Error{key_path.string() + ": the key does not belong to the certificate " + cert_path.string() +
                 " (they come from different `tandemctl pki init` runs?)"};
  return {};
}

}  // namespace

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
  return check_key_matches(path, pki.node_key(node));
}

}  // namespace tandem::agentd
