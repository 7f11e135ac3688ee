// Reading a certificate back: what `tandemctl status` shows and what the tests check.
#include <arpa/inet.h>
#include <openssl/asn1.h>

#include <ctime>

#include "openssl_util.hpp"
#include "tandem/net/pki.hpp"

namespace tandem::net {
namespace {

std::chrono::system_clock::time_point to_time_point(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return {};
  return std::chrono::system_clock::from_time_t(::timegm(&tm));
}

std::string ip_text(const ASN1_OCTET_STRING* ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  const int len = ASN1_STRING_length(ip);
  const unsigned char* data = ASN1_STRING_get0_data(ip);
  if (len == 4) inet_ntop(AF_INET, data, buf, sizeof buf);
  if (len == 16) inet_ntop(AF_INET6, data, buf, sizeof buf);
  return buf;
}

void read_alt_names(X509* cert, CertInfo& info) {
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* gen = sk_GENERAL_NAME_value(names, i);
    if (gen->type == GEN_DNS) {
      const ASN1_IA5STRING* dns = gen->d.dNSName;
      info.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                                  static_cast<std::size_t>(ASN1_STRING_length(dns)));
    } else if (gen->type == GEN_IPADD) {
      info.ip_addresses.push_back(ip_text(gen->d.iPAddress));
    }
  }
  GENERAL_NAMES_free(names);
}

std::string hex(const unsigned char* data, std::size_t len, bool colons) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < len; ++i) {
    if (colons && i > 0) out += ':';
    out += digits[data[i] >> 4];
    out += digits[data[i] & 0x0f];
  }
  return out;
}

std::string serial_hex(const X509* cert) {
  ossl::Bignum bn{ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr)};
  if (!bn) return {};
  std::string out(static_cast<std::size_t>(BN_num_bytes(bn.get())), '\0');
  BN_bn2bin(bn.get(), reinterpret_cast<unsigned char*>(out.data()));
  return hex(reinterpret_cast<const unsigned char*>(out.data()), out.size(), false);
}

}  // namespace

Result<CertInfo> inspect_certificate(std::string_view cert_pem) {
  auto parsed = ossl::parse_cert(cert_pem);
  if (!parsed) return parsed.error();
  X509* cert = parsed->get();
  CertInfo info;
  info.subject_cn = ossl::subject_cn(cert);
  info.issuer_cn = ossl::issuer_cn(cert);
  read_alt_names(cert, info);
  // X509_get_extension_flags fills the cached EKU bits the next two calls read.
  const bool has_eku = (X509_get_extension_flags(cert) & EXFLAG_XKUSAGE) != 0;
  const std::uint32_t eku = X509_get_extended_key_usage(cert);
  info.server_auth = has_eku && (eku & XKU_SSL_SERVER) != 0;
  info.client_auth = has_eku && (eku & XKU_SSL_CLIENT) != 0;
  info.is_ca = X509_check_ca(cert) > 0;
  info.serial_hex = serial_hex(cert);
  info.not_before = to_time_point(X509_get0_notBefore(cert));
  info.not_after = to_time_point(X509_get0_notAfter(cert));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (X509_digest(cert, EVP_sha256(), md, &md_len) != 1)
    return ossl::error("computing the SHA-256 fingerprint");
  info.sha256_fingerprint = hex(md, md_len, true);
  return info;
}

}  // namespace tandem::net
