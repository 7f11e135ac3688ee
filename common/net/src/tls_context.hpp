// One mutual-TLS policy for both ends, applied to the SSL_CTX under Asio's ssl::context.
#pragma once
#include <openssl/ssl.h>

#include <boost/system/error_code.hpp>

#include <filesystem>
#include <string>

#include "tandem/result.hpp"

namespace tandem::net {

enum class TlsRole { server, client };

// TLS >= 1.2; trust only `ca_file`; present `cert_file`/`key_file` (the client may leave both
// empty, which only tests do, to prove the server refuses it). The server requires a client
// certificate; the client requires a server certificate.
Status configure_mtls(SSL_CTX* ctx, TlsRole role, const std::filesystem::path& ca_file,
                      const std::filesystem::path& cert_file,
                      const std::filesystem::path& key_file);

// Why certificate verification failed on this connection ("certificate has expired"), "" if not.
std::string verify_failure(const SSL* ssl);

// A TLS or socket error in words, with the verify reason or the peer's alert when there is one:
// "certificate verify failed (certificate has expired)", "peer sent TLS alert 'unknown ca'".
std::string describe_tls_error(const boost::system::error_code& ec, const SSL* ssl);

// CN of the peer's certificate; "" when the peer sent none.
std::string peer_common_name(const SSL* ssl);

}  // namespace tandem::net
