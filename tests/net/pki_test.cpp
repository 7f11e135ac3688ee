#include <doctest/doctest.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tandem/net/pki.hpp"
#include "temp_dir.hpp"

using namespace tandem::net;
using tandem::test::TempDir;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<unsigned>(st.st_mode) & 0777U;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

const std::vector<NodeSpec> kNodes{{"node-a", {"10.0.0.2", "node-a.lan"}},
                                   {"node-b", {"10.0.0.3", "fd00::3"}}};

}  // namespace

TEST_CASE("pki init: the layout, with keys 0600 and the directory 0700") {
  TempDir tmp;
  const auto dir = tmp.path() / "pki";
  auto pki = init_cluster_pki(dir, "controller", kNodes);
  REQUIRE_MESSAGE(pki.ok(), pki.error().message);
  CHECK(mode_of(dir) == 0700);
  for (const auto& key : {pki->ca_key(), pki->controller_key(), pki->node_key("node-a"),
                          pki->node_key("node-b")})
    CHECK_MESSAGE(mode_of(key) == 0600, key);
  for (const auto& cert : {pki->ca_cert(), pki->controller_cert(), pki->node_cert("node-a"),
                           pki->node_cert("node-b")})
    CHECK_MESSAGE(mode_of(cert) == 0644, cert);
  CHECK(pki->node_cert("node-a") == dir / "nodes" / "node-a.pem");
  CHECK(read_credential(pki->node_cert("node-b"), pki->node_key("node-b")).ok());
  // No temporary files left behind by the atomic writes.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::recursive_directory_iterator(dir)) ++files;
  CHECK(files == 9);  // 4 pairs + nodes/
}

TEST_CASE("pki init: refuses to overwrite an existing CA unless asked") {
  TempDir tmp;
  const auto dir = tmp.path() / "pki";
  REQUIRE(init_cluster_pki(dir, "controller", kNodes).ok());
  const std::string ca_before = slurp(dir / "ca.pem");

  auto again = init_cluster_pki(dir, "controller", kNodes);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().message.find((dir / "ca.pem").string()) != std::string::npos);
  CHECK(again.error().message.find("refusing to overwrite") != std::string::npos);
  CHECK(slurp(dir / "ca.pem") == ca_before);

  auto forced = init_cluster_pki(dir, "controller", kNodes, Overwrite::yes);
  REQUIRE_MESSAGE(forced.ok(), forced.error().message);
  CHECK(slurp(dir / "ca.pem") != ca_before);
  CHECK(mode_of(dir / "ca.key") == 0600);
}

TEST_CASE("pki init: names that would make bad files or ambiguous CNs are refused") {
  TempDir tmp;
  CHECK_FALSE(init_cluster_pki(tmp.path(), "controller", {{"../evil", {}}}).ok());
  CHECK_FALSE(init_cluster_pki(tmp.path(), "controller", {{"a", {}}, {"a", {}}}).ok());
  auto clash = init_cluster_pki(tmp.path(), "controller", {{"controller", {}}});
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.error().message.find("controller's name") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "ca.pem"));  // refused before writing anything
}

TEST_CASE("certificate fields read back: CN, SANs, EKU, CA flag, fingerprint") {
  TempDir tmp;
  auto pki = init_cluster_pki(tmp.path(), "controller", kNodes);
  REQUIRE(pki.ok());

  auto ca = inspect_certificate_file(pki->ca_cert());
  REQUIRE(ca.ok());
  CHECK(ca->is_ca);
  CHECK(ca->subject_cn == "tandem cluster CA");
  CHECK(ca->issuer_cn == ca->subject_cn);

  auto node = inspect_certificate_file(pki->node_cert("node-a"));
  REQUIRE_MESSAGE(node.ok(), node.error().message);
  CHECK(node->subject_cn == "node-a");
  CHECK(node->issuer_cn == "tandem cluster CA");
  CHECK(node->dns_names == std::vector<std::string>{"node-a", "node-a.lan"});
  CHECK(node->ip_addresses == std::vector<std::string>{"10.0.0.2"});
  CHECK(node->server_auth);
  CHECK(node->client_auth);  // agent to agent (stage): see pki_cluster.cpp
  CHECK_FALSE(node->is_ca);
  CHECK(node->sha256_fingerprint.size() == 32 * 3 - 1);
  CHECK(node->sha256_fingerprint[2] == ':');
  CHECK(!node->serial_hex.empty());
  CHECK(node->serial_hex.size() <= 32);
  const auto now = std::chrono::system_clock::now();
  CHECK(node->not_before < now);
  CHECK(node->not_after > now + std::chrono::hours(24 * 700));

  auto b = inspect_certificate_file(pki->node_cert("node-b"));
  REQUIRE(b.ok());
  CHECK(contains(b->ip_addresses, "fd00::3"));
  CHECK(b->serial_hex != node->serial_hex);

  auto ctl = inspect_certificate_file(pki->controller_cert());
  REQUIRE(ctl.ok());
  CHECK(ctl->subject_cn == "controller");
  CHECK(ctl->client_auth);
  CHECK_FALSE(ctl->server_auth);
}

TEST_CASE("the CA carries critical basicConstraints CA:TRUE and keyUsage keyCertSign,cRLSign") {
  auto ca = make_ca();
  REQUIRE(ca.ok());
  BIO* bio = BIO_new_mem_buf(ca->cert_pem.data(), static_cast<int>(ca->cert_pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(cert != nullptr);
  const int bc = X509_get_ext_by_NID(cert, NID_basic_constraints, -1);
  const int ku = X509_get_ext_by_NID(cert, NID_key_usage, -1);
  REQUIRE(bc >= 0);
  REQUIRE(ku >= 0);
  CHECK(X509_EXTENSION_get_critical(X509_get_ext(cert, bc)) == 1);
  CHECK(X509_EXTENSION_get_critical(X509_get_ext(cert, ku)) == 1);
  CHECK(X509_get_key_usage(cert) == (KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  CHECK(X509_check_ca(cert) == 1);
  CHECK(EVP_PKEY_get_bits(X509_get0_pubkey(cert)) == 256);
  X509_free(cert);
}

TEST_CASE("validity offsets make expired and not-yet-valid certificates") {
  auto ca = make_ca();
  REQUIRE(ca.ok());
  const auto now = std::chrono::system_clock::now();
  auto expired = issue_certificate(
      *ca, {.common_name = "old", .client_auth = true, .validity = {-48h, -24h}});
  REQUIRE(expired.ok());
  CHECK(inspect_certificate(expired->cert_pem)->not_after < now);
  auto future = issue_certificate(
      *ca, {.common_name = "new", .client_auth = true, .validity = {24h, 48h}});
  REQUIRE(future.ok());
  CHECK(inspect_certificate(future->cert_pem)->not_before > now);
  CHECK_FALSE(issue_certificate(*ca, {.common_name = "x", .client_auth = true,
                                      .validity = {24h, 1h}})
                  .ok());
}

TEST_CASE("issuing refuses specs that would make a useless or wrong certificate") {
  auto ca = make_ca();
  REQUIRE(ca.ok());
  auto no_usage = issue_certificate(*ca, {.common_name = "x"});
  REQUIRE_FALSE(no_usage.ok());
  CHECK(no_usage.error().message.find("serverAuth") != std::string::npos);
  auto bad_ip = issue_certificate(
      *ca, {.common_name = "x", .ip_addresses = {"10.0.0.300"}, .server_auth = true});
  REQUIRE_FALSE(bad_ip.ok());
  CHECK(bad_ip.error().message.find("'10.0.0.300' is not an IPv4 or IPv6 address") !=
        std::string::npos);
  auto other = make_ca();
  REQUIRE(other.ok());
  auto mixed = issue_certificate({ca->cert_pem, other->key_pem},
                                 {.common_name = "x", .server_auth = true});
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.error().message.find("does not belong") != std::string::npos);
}

TEST_CASE("read_credential: a key from another pair is refused, naming both files") {
  TempDir tmp;
  auto ca = make_ca();
  auto other = make_ca();
  REQUIRE(ca.ok());
  REQUIRE(other.ok());
  REQUIRE(write_credential({ca->cert_pem, other->key_pem}, tmp.path() / "c.pem",
                           tmp.path() / "c.key", Overwrite::no)
              .ok());
  auto r = read_credential(tmp.path() / "c.pem", tmp.path() / "c.key");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("c.key: key does not belong to") != std::string::npos);
  auto missing = read_credential(tmp.path() / "nope.pem", tmp.path() / "c.key");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("nope.pem") != std::string::npos);
}

TEST_CASE("write_file_atomic: no-overwrite leaves the old file, overwrite replaces it") {
  TempDir tmp;
  const auto f = tmp.path() / "f";
  REQUIRE(write_file_atomic(f, "one", 0600, Overwrite::no).ok());
  auto refused = write_file_atomic(f, "two", 0600, Overwrite::no);
  REQUIRE_FALSE(refused.ok());
  CHECK(slurp(f) == "one");
  REQUIRE(write_file_atomic(f, "three", 0640, Overwrite::yes).ok());
  CHECK(slurp(f) == "three");
  CHECK(mode_of(f) == 0640);
  CHECK(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator{}) == 1);
  auto no_dir = write_file_atomic(tmp.path() / "missing" / "f", "x", 0600, Overwrite::no);
  REQUIRE_FALSE(no_dir.ok());
  CHECK(no_dir.error().message.find("missing/f") != std::string::npos);
}
