// The engine's plain HTTP/1.1 server (the OpenAI API is served without TLS, like vLLM's).
// A handler gets the request and a Responder it may keep: answer at once, or stream
// (Server-Sent Events) from another thread, and learn when the client goes away so the
// request's KV blocks can be freed mid-generation.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::engine::api {

struct HttpRequest {
  std::string method;
  std::string target;
  std::string path;   // target without the query
  std::string query;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// Thread-safe; valid after the handler returns, but not after the HttpServer is destroyed: stop
// whatever holds Responders (the engine) first. Exactly one of send() or begin_stream()...end().
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void send(unsigned status, const std::string& content_type, std::string body) = 0;
  virtual void begin_stream(const std::string& content_type) = 0;  // 200, chunked, then write()s
  virtual void write(std::string chunk) = 0;
  virtual void end() = 0;
  virtual bool closed() const = 0;
  // Called once, from a server thread, when the client disconnects before end().
  virtual void on_close(std::function<void()> callback) = 0;
};

using Handler = std::function<void(const HttpRequest&, std::shared_ptr<Responder>)>;

// Limits that keep one client from holding the server: a connection that sends its headers too
// slowly (slowloris) or sits idle is closed; one that would pass a connection cap gets a 503.
struct HttpServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: the kernel picks; port() reports it
  std::size_t body_limit = 32 * 1024 * 1024;
  std::size_t header_limit = 16 * 1024;  // request line + headers; beyond: 431
  std::chrono::milliseconds header_timeout{10'000};  // a new connection's first request line + headers
  std::chrono::milliseconds idle_timeout{30'000};    // keep-alive: until the next request's headers are in
  std::chrono::milliseconds body_timeout{60'000};    // the body, once its headers are in
  unsigned max_connections = 1024;           // open at once, all clients
  unsigned max_connections_per_client = 256; // open at once from one address
  unsigned threads = 2;
  // Where a handler's escaped exception and refused connections are reported (default: stderr).
  std::function<void(const std::string&)> log;
  // The server's own replies (a refused connection, a body over the limit) name the setting to
  // change by its field in backquotes (`max_connections`); the command line maps that to the name
  // its operator knows (--max-connections). Empty: the field names stay.
  std::function<std::string(std::string_view)> name_settings;
};

class HttpServer {
 public:
  // Binds and starts serving; an error names the address and why.
  static std::unique_ptr<HttpServer> start(const HttpServerOptions& opts, Handler handler, std::string& error);
  virtual ~HttpServer() = default;
  virtual std::uint16_t port() const = 0;
  virtual void stop() = 0;
};

}  // namespace tandem::engine::api
