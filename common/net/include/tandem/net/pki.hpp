// The cluster PKI: one CA per cluster, a client certificate for the controller and a server
// certificate per node (CN = node name). Built on the OpenSSL 3 API; no openssl CLI.
#pragma once
#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::net {

// A certificate and its private key, both PEM (the key unencrypted PKCS#8).
struct Credential {
  std::string cert_pem;
  std::string key_pem;
};

// Validity is given as offsets from now so tests can make expired or not-yet-valid certificates.
struct Validity {
  std::chrono::seconds not_before = std::chrono::minutes(-5);  // tolerate small clock skew
  std::chrono::seconds not_after = std::chrono::hours(24 * 730);
};

struct CaSpec {
  std::string common_name = "tandem cluster CA";
  Validity validity{std::chrono::minutes(-5), std::chrono::hours(24 * 3650)};
};

struct LeafSpec {
  std::string common_name{};
  std::vector<std::string> dns_names{};
  std::vector<std::string> ip_addresses{};  // IPv4 or IPv6 literals
  bool server_auth = false;               // extendedKeyUsage serverAuth
  bool client_auth = false;               // extendedKeyUsage clientAuth
  Validity validity{};
};

// EC P-256 key, self-signed, basicConstraints CA:TRUE (critical), keyUsage keyCertSign,cRLSign.
Result<Credential> make_ca(const CaSpec& spec = {});

// A leaf signed by `ca`, with a random 128-bit serial. Fails if the spec asks for no usage at all,
// an address is not an IP literal, or the CA's key does not belong to its certificate.
Result<Credential> issue_certificate(const Credential& ca, const LeafSpec& spec);

enum class Overwrite { no, yes };

// Write `content` to `path` atomically (temp file in the same directory, fsync, rename), created
// with `mode`. With Overwrite::no an existing file is an error and is left untouched.
Status write_file_atomic(const std::filesystem::path& path, std::string_view content,
                         unsigned mode, Overwrite overwrite);

// Certificate 0644, key 0600.
Status write_credential(const Credential& cred, const std::filesystem::path& cert_path,
                        const std::filesystem::path& key_path, Overwrite overwrite);
// Reads both files and checks that they parse and that the key belongs to the certificate.
Result<Credential> read_credential(const std::filesystem::path& cert_path,
                                   const std::filesystem::path& key_path);

// Where `tandemctl pki init DIR` puts things; enrolment and the agent read the same layout.
struct PkiLayout {
  std::filesystem::path dir;

  std::filesystem::path ca_cert() const { return dir / "ca.pem"; }
  std::filesystem::path ca_key() const { return dir / "ca.key"; }
  std::filesystem::path controller_cert() const { return dir / "controller.pem"; }
  std::filesystem::path controller_key() const { return dir / "controller.key"; }
  std::filesystem::path node_cert(const std::string& node) const;
  std::filesystem::path node_key(const std::string& node) const;
};

struct NodeSpec {
  std::string name{};                    // becomes the CN the controller checks
  std::vector<std::string> addresses{};  // IP literals become IP SANs, anything else DNS SANs
};

// Writes ca.pem/ca.key, controller.pem/.key (clientAuth only) and nodes/<name>.pem/.key
// (serverAuth and clientAuth: a worker's agent pulls staged files from the head's; SANs: the name plus its addresses). Refuses, before writing anything, if any of
// those files exists and overwrite is Overwrite::no: replacing the CA silently would cut every
// enrolled node off.
Result<PkiLayout> init_cluster_pki(const std::filesystem::path& dir,
                                   const std::string& controller_name,
                                   const std::vector<NodeSpec>& nodes,
                                   Overwrite overwrite = Overwrite::no);

// What `tandemctl status` shows about a certificate.
struct CertInfo {
  std::string subject_cn;
  std::string issuer_cn;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  bool server_auth = false;
  bool client_auth = false;
  bool is_ca = false;
  std::string serial_hex;
  std::chrono::system_clock::time_point not_before;
  std::chrono::system_clock::time_point not_after;
  std::string sha256_fingerprint;  // "AB:CD:...", as browsers and `openssl x509 -fingerprint` show
};

Result<CertInfo> inspect_certificate(std::string_view cert_pem);
Result<CertInfo> inspect_certificate_file(const std::filesystem::path& cert_path);

}  // namespace tandem::net
