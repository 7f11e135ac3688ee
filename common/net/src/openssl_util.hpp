// RAII owners and error text for OpenSSL objects, shared by the PKI and the TLS code.
#pragma once
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem::net::ossl {

template <auto Free>
struct Deleter {
  template <class T>
  void operator()(T* p) const { Free(p); }
};

using Bio = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using Pkey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using Bignum = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using GeneralNames = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;

// Drains OpenSSL's thread-local error queue into one line; `fallback` when the queue is empty.
std::string last_error(std::string_view fallback = "unknown OpenSSL error");

// `what: <OpenSSL reasons>`
Error error(std::string_view what);

Result<X509Ptr> parse_cert(std::string_view pem);
Result<Pkey> parse_key(std::string_view pem);
Result<std::string> cert_to_pem(X509* cert);
Result<std::string> key_to_pem(EVP_PKEY* key);

// The first commonName of a certificate's subject (or issuer), "" when there is none.
std::string subject_cn(const X509* cert);
std::string issuer_cn(const X509* cert);

}  // namespace tandem::net::ossl
