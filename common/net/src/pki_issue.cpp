// Making the cluster CA and issuing leaf certificates.
#include <openssl/rand.h>

#include "openssl_util.hpp"
#include "tandem/net/pki.hpp"

namespace tandem::net {
namespace {

Result<ossl::Pkey> make_p256_key() {
  ossl::PkeyCtx ctx{EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr)};
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_group_name(ctx.get(), "P-256") != 1 ||
      EVP_PKEY_generate(ctx.get(), &raw) != 1)
    return ossl::error("generating an EC P-256 key");
  return ossl::Pkey{raw};
}

// 128 random bits; a positive INTEGER however the top bit falls (DER adds a leading zero).
Status set_random_serial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return ossl::error("drawing a random serial");
  bytes[15] |= 1;  // never zero, which RFC 5280 forbids
  ossl::Bignum bn{BN_bin2bn(bytes, sizeof bytes, nullptr)};
  ASN1_INTEGER* serial = bn ? BN_to_ASN1_INTEGER(bn.get(), nullptr) : nullptr;
  const bool ok = serial != nullptr && X509_set_serialNumber(cert, serial) == 1;
  ASN1_INTEGER_free(serial);
  if (!ok) return ossl::error("setting the serial number");
  return {};
}

Status set_common_name(X509* cert, const std::string& cn) {
  if (cn.empty()) return Error{"a certificate needs a common name"};
  X509_NAME* name = X509_get_subject_name(cert);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    return ossl::error("setting CN '" + cn + "'");
  return {};
}

Status set_validity(X509* cert, const Validity& v) {
  if (v.not_after <= v.not_before) return Error{"not_after must be later than not_before"};
  if (X509_gmtime_adj(X509_getm_notBefore(cert), static_cast<long>(v.not_before.count())) ==
          nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert), static_cast<long>(v.not_after.count())) == nullptr)
    return ossl::error("setting the validity window");
  return {};
}

Status add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
  const bool ok = ext != nullptr && X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  if (!ok) return ossl::error(std::string("adding extension ") + OBJ_nid2sn(nid) + "=" + value);
  return {};
}

Status push_name(GENERAL_NAMES* names, int type, const std::string& text) {
  GENERAL_NAME* gen = GENERAL_NAME_new();
  if (gen == nullptr) return ossl::error("allocating a subjectAltName");
  if (type == GEN_IPADD) {
    ASN1_OCTET_STRING* ip = a2i_IPADDRESS(text.c_str());
    if (ip == nullptr) {
      GENERAL_NAME_free(gen);
      return Error{"'" + text + "' is not an IPv4 or IPv6 address"};
    }
    GENERAL_NAME_set0_value(gen, GEN_IPADD, ip);
  } else {
    ASN1_IA5STRING* dns = ASN1_IA5STRING_new();
    if (dns == nullptr || ASN1_STRING_set(dns, text.data(), static_cast<int>(text.size())) != 1) {
      ASN1_IA5STRING_free(dns);
      GENERAL_NAME_free(gen);
      return ossl::error("encoding DNS name '" + text + "'");
    }
    GENERAL_NAME_set0_value(gen, GEN_DNS, dns);
  }
  if (sk_GENERAL_NAME_push(names, gen) <= 0) {
    GENERAL_NAME_free(gen);
    return ossl::error("adding a subjectAltName");
  }
  return {};
}

// Built as GENERAL_NAMEs rather than a config string so a name can never smuggle in ",IP:...".
Status add_subject_alt_names(X509* cert, const LeafSpec& spec) {
  if (spec.dns_names.empty() && spec.ip_addresses.empty()) return {};
  ossl::GeneralNames names{sk_GENERAL_NAME_new_null()};
  if (!names) return ossl::error("allocating subjectAltNames");
  for (const auto& dns : spec.dns_names)
    if (Status s = push_name(names.get(), GEN_DNS, dns); !s) return s;
  for (const auto& ip : spec.ip_addresses)
    if (Status s = push_name(names.get(), GEN_IPADD, ip); !s) return s;
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1)
    return ossl::error("adding subjectAltName");
  return {};
}

Result<ossl::X509Ptr> new_cert(EVP_PKEY* key, const std::string& cn, const Validity& v) {
  ossl::X509Ptr cert{X509_new()};
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1)
    return ossl::error("creating a certificate");
  if (Status s = set_random_serial(cert.get()); !s) return s.error();
  if (Status s = set_common_name(cert.get(), cn); !s) return s.error();
  if (Status s = set_validity(cert.get(), v); !s) return s.error();
  return cert;
}

Result<Credential> sign_and_encode(X509* cert, EVP_PKEY* signer, EVP_PKEY* key) {
  if (X509_sign(cert, signer, EVP_sha256()) == 0) return ossl::error("signing the certificate");
  auto cert_pem = ossl::cert_to_pem(cert);
  if (!cert_pem) return cert_pem.error();
  auto key_pem = ossl::key_to_pem(key);
  if (!key_pem) return key_pem.error();
  return Credential{std::move(*cert_pem), std::move(*key_pem)};
}

Status all_ok(std::initializer_list<Status> steps) {
  for (const auto& s : steps)
    if (!s) return s;
  return {};
}

}  // namespace

Result<Credential> make_ca(const CaSpec& spec) {
  auto key = make_p256_key();
  if (!key) return key.error().with_context("making CA '" + spec.common_name + "'");
  auto cert = new_cert(key->get(), spec.common_name, spec.validity);
  if (!cert) return cert.error().with_context("making CA '" + spec.common_name + "'");
  X509* c = cert->get();
  // Self-signed: the issuer name is the subject name.
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1)
    return ossl::error("setting the CA issuer name");
  Status s = all_ok({
      add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE"),
      add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign"),
      add_ext(c, c, NID_subject_key_identifier, "hash"),
  });
  if (!s) return s.error().with_context("making CA '" + spec.common_name + "'");
  return sign_and_encode(c, key->get(), key->get());
}

Result<Credential> issue_certificate(const Credential& ca, const LeafSpec& spec) {
  const std::string where = "issuing certificate for '" + spec.common_name + "'";
  if (!spec.server_auth && !spec.client_auth)
    return Error{where + ": ask for serverAuth, clientAuth or both"};
  auto ca_cert = ossl::parse_cert(ca.cert_pem);
  if (!ca_cert) return ca_cert.error().with_context(where + ": CA certificate");
  auto ca_key = ossl::parse_key(ca.key_pem);
  if (!ca_key) return ca_key.error().with_context(where + ": CA key");
  if (X509_check_private_key(ca_cert->get(), ca_key->get()) != 1)
    return ossl::error(where + ": the CA key does not belong to the CA certificate");

  auto key = make_p256_key();
  if (!key) return key.error().with_context(where);
  auto cert = new_cert(key->get(), spec.common_name, spec.validity);
  if (!cert) return cert.error().with_context(where);
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(ca_cert->get())) != 1)
    return ossl::error(where + ": setting the issuer name");
  const std::string eku = spec.server_auth && spec.client_auth ? "serverAuth,clientAuth"
                          : spec.server_auth                   ? "serverAuth"
                                                               : "clientAuth";
  Status s = all_ok({
      add_ext(c, ca_cert->get(), NID_basic_constraints, "critical,CA:FALSE"),
      add_ext(c, ca_cert->get(), NID_key_usage, "critical,digitalSignature"),
      add_ext(c, ca_cert->get(), NID_ext_key_usage, eku.c_str()),
      add_ext(c, ca_cert->get(), NID_subject_key_identifier, "hash"),
      add_ext(c, ca_cert->get(), NID_authority_key_identifier, "keyid:always"),
      add_subject_alt_names(c, spec),
  });
  if (!s) return s.error().with_context(where);
  return sign_and_encode(c, ca_key->get(), key->get());
}

}  // namespace tandem::net
