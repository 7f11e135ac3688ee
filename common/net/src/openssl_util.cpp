#include "openssl_util.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <climits>

namespace tandem::net::ossl {
namespace {

Bio mem_bio(std::string_view data) {
  // Callers bound PEM sizes far below INT_MAX; the check keeps a huge input from wrapping.
  if (data.size() > static_cast<std::size_t>(INT_MAX)) return Bio{};
  return Bio{BIO_new_mem_buf(data.data(), static_cast<int>(data.size()))};
}

std::string bio_text(BIO* bio) {
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  return len > 0 ? std::string(data, static_cast<std::size_t>(len)) : std::string{};
}

std::string name_cn(const X509_NAME* name) {
  if (name == nullptr) return {};
  const int idx = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (idx < 0) return {};
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  unsigned char* utf8 = nullptr;
  const int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) return {};
  std::string cn(reinterpret_cast<const char*>(utf8), static_cast<std::size_t>(len));
  OPENSSL_free(utf8);
  return cn;
}

}  // namespace

std::string last_error(std::string_view fallback) {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    if (!text.empty()) text += "; ";
    const char* reason = ERR_reason_error_string(code);
    text += reason != nullptr ? reason : buf;
  }
  return text.empty() ? std::string(fallback) : text;
}

Error error(std::string_view what) { return Error{std::string(what) + ": " + last_error()}; }

Result<X509Ptr> parse_cert(std::string_view pem) {
  Bio bio = mem_bio(pem);
  X509Ptr cert{bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr};
  if (!cert) return error("not a PEM certificate");
  return cert;
}

Result<Pkey> parse_key(std::string_view pem) {
  Bio bio = mem_bio(pem);
  Pkey key{bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr};
  if (!key) return error("not a PEM private key");
  return key;
}

Result<std::string> cert_to_pem(X509* cert) {
  Bio bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return error("encoding certificate");
  return bio_text(bio.get());
}

Result<std::string> key_to_pem(EVP_PKEY* key) {
  Bio bio{BIO_new(BIO_s_mem())};
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return error("encoding private key");
  return bio_text(bio.get());
}

std::string subject_cn(const X509* cert) {
  return cert != nullptr ? name_cn(X509_get_subject_name(cert)) : std::string{};
}

std::string issuer_cn(const X509* cert) {
  return cert != nullptr ? name_cn(X509_get_issuer_name(cert)) : std::string{};
}

}  // namespace tandem::net::ossl
