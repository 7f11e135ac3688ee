// The agent's HTTPS server: mutual TLS always (there is no plaintext mode), a Router behind it.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tandem/result.hpp"
#include "tandem/net/router.hpp"

namespace tandem::net {

struct ServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the kernel picks one; HttpsServer::port() reports it
  std::filesystem::path ca_file;    // the only CA whose client certificates are accepted
  std::filesystem::path cert_file;  // this node's certificate (CN = node name)
  std::filesystem::path key_file;
  // When not empty, only these client CNs are served; others get 403 and the handler never runs.
  std::vector<std::string> allowed_client_cns{};
  // Requests whose target starts with this prefix are served to any client the CA signed; their
  // handlers must check Request::client_cn themselves (agent to agent: a node of the manifest).
  std::string peer_prefix{};
  std::size_t body_limit = 1024 * 1024;  // larger bodies get 413
  // Requests whose target starts with this prefix may carry up to large_body_limit instead (an
  // agent's pushed stage chunks); the limit is chosen once the header is read.
  std::string large_body_prefix{};
  std::size_t large_body_limit = 0;
  // Bounds the TLS handshake and each request read, so a silent client cannot hold a connection.
  std::chrono::milliseconds io_timeout = std::chrono::seconds(30);
  // Handlers run on these threads; a slow handler occupies one of them.
  unsigned threads = 2;
};

class HttpsServer {
 public:
  // Loads the certificates, binds and starts serving before returning.
  static Result<std::unique_ptr<HttpsServer>> start(ServerOptions options, Router router);
  ~HttpsServer();  // stops
  HttpsServer(const HttpsServer&) = delete;
  HttpsServer& operator=(const HttpsServer&) = delete;

  std::uint16_t port() const;
  // Stops accepting, drops open connections and joins the threads. Idempotent. Not from inside a
  // handler: it would join its own thread.
  void stop();

  struct Impl;

 private:
  explicit HttpsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::net
