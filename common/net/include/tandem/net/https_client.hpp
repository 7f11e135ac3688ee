// The controller's HTTPS client: mutual TLS, and the server must prove it is the expected node.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "tandem/net/result.hpp"

namespace tandem::net {

struct ClientOptions {
  std::filesystem::path ca_file;    // the cluster CA; servers signed by anything else are refused
  std::filesystem::path cert_file;  // the controller's certificate and key; empty for no client
  std::filesystem::path key_file;   // certificate (only tests want that: servers refuse it)
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds io_timeout = std::chrono::seconds(60);  // write request + read reply
  std::size_t response_limit = 64 * 1024 * 1024;
};

struct Endpoint {
  std::string host;       // IP literal or resolvable name
  std::uint16_t port = 0;
  std::string node_name;  // the CN the server certificate must carry; also sent as SNI
};

struct ClientResponse {
  unsigned status = 0;
  std::string body;
  std::string content_type;
};

class HttpsClient {
 public:
  // Loads the CA and the client certificate once; requests reuse them.
  static Result<HttpsClient> create(const ClientOptions& options);
  ~HttpsClient();
  HttpsClient(HttpsClient&&) noexcept;
  HttpsClient& operator=(HttpsClient&&) noexcept;

  // One connection per request. A non-2xx status is still a response; an error value means no
  // HTTP answer came back, and says where ("10.0.0.2:7443: TLS handshake failed: ...").
  Result<ClientResponse> request(const Endpoint& endpoint, const std::string& method,
                                 const std::string& target, const std::string& body = {}) const;
  // The same with this call's own bound on writing the request and reading the answer (a long
  // agent step, like hashing a model, needs more than a health probe).
  Result<ClientResponse> request(const Endpoint& endpoint, const std::string& method,
                                 const std::string& target, const std::string& body,
                                 std::chrono::milliseconds io_timeout) const;
  Result<ClientResponse> get(const Endpoint& endpoint, const std::string& target) const {
    return request(endpoint, "GET", target);
  }
  Result<ClientResponse> post(const Endpoint& endpoint, const std::string& target,
                              const std::string& json_body) const {
    return request(endpoint, "POST", target, json_body);
  }

  struct Impl;

 private:
  explicit HttpsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::net
