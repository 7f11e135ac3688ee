// The project's one HTTP/1.1 client, TLS optional. The controller talks to agents over mutual TLS
// (the server must also prove it is the node expected) and to serving ports over plain HTTP
// (probes, gates, bench: OpenAI-compatible endpoints, with Server-Sent Events). One connection per
// request (KeptConnection: several, for a stage's chunk stream), every step (resolve, connect, handshake, write, read) bounded by a deadline, one
// blocking call per request on a private io_context.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "tandem/result.hpp"

namespace tandem::net {

struct ClientOptions {
  bool tls = true;                  // false: plain HTTP, and the three files below are not read
  std::filesystem::path ca_file;    // the cluster CA; servers signed by anything else are refused
  std::filesystem::path cert_file;  // the controller's certificate and key; empty for no client
  std::filesystem::path key_file;   // certificate (only tests want that: servers refuse it)
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);  // resolving, then connecting
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds io_timeout = std::chrono::seconds(60);  // write request + read reply
  std::size_t response_limit = 64 * 1024 * 1024;
};

struct Endpoint {
  std::string host;       // IP literal (IPv6 without brackets) or resolvable name
  std::uint16_t port = 0;
  std::string node_name;  // TLS: the CN the server certificate must carry; also sent as SNI
};

struct ClientResponse {
  unsigned status = 0;
  std::string body;
  std::string content_type;
};

// What a streaming request ended with. When the status is not 200, or the reply was not an event
// stream, `body` holds the whole reply (an error document) and no event was delivered.
struct StreamEnd {
  unsigned status = 0;
  std::string body;
  bool saw_done = false;   // the stream ended with "data: [DONE]"
  bool stopped = false;    // on_event asked to stop early
  std::size_t events = 0;  // data events delivered (without [DONE])
};

// Splits a byte stream into Server-Sent Events ("data:" lines joined by '\n'; comments and other
// fields skipped; LF or CRLF line ends). Public so the framing can be tested without a socket.
class SseDecoder {
 public:
  // Feeds bytes; calls on_data for each complete event with data. Returns false if on_data did.
  bool feed(const std::string& bytes, const std::function<bool(const std::string&)>& on_data);
  // At end of stream: an event whose blank line never came is still delivered.
  bool finish(const std::function<bool(const std::string&)>& on_data);

 private:
  bool line(std::string l, const std::function<bool(const std::string&)>& on_data);
  std::string pending_;  // bytes of an incomplete line
  std::string data_;     // data of the event being read
  bool has_data_ = false;
};

class HttpClient {
 public:
  // With TLS, loads the CA and the client certificate once; requests reuse them.
  static Result<HttpClient> create(const ClientOptions& options);
  ~HttpClient();
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;

  // One request. A non-2xx status is still a response; an error value means no HTTP answer came
  // back, and says where and at which step ("10.0.0.2:7443: TLS handshake failed: ...",
  // "127.0.0.1:8888: connecting: Connection refused").
  Result<ClientResponse> request(const Endpoint& endpoint, const std::string& method, const std::string& target,
                                 const std::string& body = {}) const;
  // The same with this call's own bound on writing the request and reading the answer (a long
  // agent step, like hashing a model, needs more than a health probe).
  Result<ClientResponse> request(const Endpoint& endpoint, const std::string& method, const std::string& target,
                                 const std::string& body, std::chrono::milliseconds io_timeout) const;
  Result<ClientResponse> get(const Endpoint& endpoint, const std::string& target) const {
    return request(endpoint, "GET", target);
  }
  Result<ClientResponse> post(const Endpoint& endpoint, const std::string& target, const std::string& json_body) const {
    return request(endpoint, "POST", target, json_body);
  }

  // POSTs body to target and reads the reply as Server-Sent Events: on_event gets each event's
  // data as soon as it is parsed ("[DONE]" excluded); return false to stop reading. `io_timeout`
  // is the longest silence allowed between two reads (a long prefill is silence too),
  // `total_timeout` the whole answer. A connection that breaks mid-stream is an error value that
  // says how many events came first.
  Result<StreamEnd> stream_sse(const Endpoint& endpoint, const std::string& target, const std::string& body,
                               const std::function<bool(const std::string& data)>& on_event,
                               std::chrono::milliseconds io_timeout, std::chrono::milliseconds total_timeout) const;

  struct Impl;

 private:
  friend class KeptConnection;
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One connection to one endpoint kept open across requests (HTTP/1.1 keep-alive): a stage pull asks
// for hundreds of chunks, and a TCP and TLS handshake for each costs more than the bytes on a fast
// fabric. One per thread (not thread-safe); it must not outlive the client. After an error it is
// closed, and a request on a reused connection that the server closed while idle is sent once more
// on a new one (so only idempotent requests belong here).
class KeptConnection {
 public:
  KeptConnection(const HttpClient& client, Endpoint endpoint);
  ~KeptConnection();
  KeptConnection(const KeptConnection&) = delete;
  KeptConnection& operator=(const KeptConnection&) = delete;
  Result<ClientResponse> request(const std::string& method, const std::string& target, const std::string& body,
                                 std::chrono::milliseconds io_timeout);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The agents' client has always been called this; it is the same client with TLS on.
using HttpsClient = HttpClient;

}  // namespace tandem::net
