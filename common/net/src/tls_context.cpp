#include "tls_context.hpp"

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/ssl/error.hpp>

#include "openssl_util.hpp"

namespace tandem::net {

Status configure_mtls(SSL_CTX* ctx, TlsRole role, const std::filesystem::path& ca_file,
                      const std::filesystem::path& cert_file,
                      const std::filesystem::path& key_file) {
  ERR_clear_error();
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
    return ossl::error("requiring TLS 1.2 or later");
  if (SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) != 1)
    return ossl::error(ca_file.string() + ": loading the CA certificate");
  if (!cert_file.empty() || !key_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
      return ossl::error(cert_file.string() + ": loading the certificate");
    if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return ossl::error(key_file.string() + ": loading the private key");
    if (SSL_CTX_check_private_key(ctx) != 1)
      return ossl::error(key_file.string() + ": key does not belong to " + cert_file.string());
  } else if (role == TlsRole::server) {
    return Error{"a TLS server needs a certificate and a key"};
  }
  // Never send the CA along: the peer must already trust it, and a sent copy only turns "not
  // our CA" into the vaguer "self-signed certificate in certificate chain".
  SSL_CTX_set_mode(ctx, SSL_MODE_NO_AUTO_CHAIN);
  if (role == TlsRole::server) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    // Tell clients which CA to pick their certificate for.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca_file.c_str());
    if (names == nullptr) return ossl::error(ca_file.string() + ": reading the CA name");
    SSL_CTX_set_client_CA_list(ctx, names);
    // No resumption: every connection proves its client certificate afresh.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  return {};
}

std::string verify_failure(const SSL* ssl) {
  const long result = SSL_get_verify_result(ssl);
  if (result == X509_V_OK) return {};
  return X509_verify_cert_error_string(result);
}

std::string describe_tls_error(const boost::system::error_code& ec, const SSL* ssl) {
  if (ec == boost::asio::ssl::error::stream_truncated)
    return "connection closed without a TLS close_notify";
  if (ec.category() != boost::asio::error::get_ssl_category()) return ec.message();
  const auto code = static_cast<unsigned long>(ec.value());
  const int reason = ERR_GET_REASON(code);
  const char* text = ERR_reason_error_string(code);
  const std::string what = text != nullptr ? text : ec.message();
  if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && ssl != nullptr) {
    const std::string why = verify_failure(ssl);
    return why.empty() ? what : what + " (" + why + ")";
  }
  // Alerts from the peer map to reasons above SSL_AD_REASON_OFFSET in OpenSSL's error table.
  if (reason > SSL_AD_REASON_OFFSET) return "peer sent TLS alert '" + what + "'";
  return what;
}

std::string peer_common_name(const SSL* ssl) { return ossl::subject_cn(SSL_get0_peer_certificate(ssl)); }

}  // namespace tandem::net
