// The Beast side of HttpsServer: accept, TLS handshake, read, route, write, repeat or close.
#include "tandem/net/https_server.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <optional>
#include <thread>

#include "tls_context.hpp"
#include "tandem/url.hpp"

namespace tandem::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// After a 413 the client is usually still sending; reading (and dropping) a bounded amount lets
// it finish and read our answer instead of hitting a reset.
constexpr std::size_t kDrainLimit = 16 * 1024 * 1024;

struct Shared {
  ServerOptions options;
  Router router;
  ssl::context ssl{ssl::context::tls_server};
};

std::string endpoint_text(const tcp::endpoint& ep) {
  return host_port(ep.address().to_string(), ep.port());
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Shared& shared)
      : stream_(std::move(socket), shared.ssl), shared_(shared) {
    beast::error_code ec;
    const auto ep = beast::get_lowest_layer(stream_).socket().remote_endpoint(ec);
    peer_ = ec ? std::string("?") : endpoint_text(ep);
  }

  void run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->arm_timer(self->shared_.options.io_timeout);
      self->stream_.async_handshake(ssl::stream_base::server,
                                    [self](beast::error_code ec) { self->on_handshake(ec); });
    });
  }

 private:
  void arm_timer(std::chrono::milliseconds t) { beast::get_lowest_layer(stream_).expires_after(t); }

  void on_handshake(beast::error_code ec) {
    if (ec) {
      spdlog::warn("TLS handshake from {} failed: {}", peer_,
                   describe_tls_error(ec, stream_.native_handle()));
      return;  // dropping the last reference closes the socket
    }
    cn_ = peer_common_name(stream_.native_handle());
    read();
  }

  void read() {
    parser_.emplace();
    const auto& o = shared_.options;
    // The parser refuses a Content-Length over its limit as soon as the header is in, before the
    // target is known: the header is read under the larger limit, and on_header applies the
    // request's own.
    body_limit_ = o.large_body_prefix.empty() ? o.body_limit : std::max(o.body_limit, o.large_body_limit);
    parser_->body_limit(body_limit_);
    arm_timer(o.io_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  // The header decides the body's limit: only the large-body prefix keeps the larger one.
  void on_header(beast::error_code ec) {
    if (ec) return on_read(ec);
    const auto& o = shared_.options;
    if (std::string(parser_->get().target()).rfind(o.large_body_prefix, 0) != 0 || o.large_body_prefix.empty()) {
      body_limit_ = o.body_limit;
      parser_->body_limit(body_limit_);
      const auto length = parser_->content_length();
      if (length && *length > body_limit_) return on_read(http::error::body_limit);
    }
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec2, std::size_t) { self->on_read(ec2); });
  }

  void on_read(beast::error_code ec) {
    started_ = Clock::now();
    const auto& req = parser_->get();
    method_ = std::string(req.method_string());
    target_ = std::string(req.target());
    if (ec == http::error::end_of_stream) return shutdown();
    if (ec == http::error::body_limit) {
      draining_ = true;
      return send(Response::error(413, "request body exceeds the limit of " + std::to_string(body_limit_) + " bytes"),
                  false);
    }
    if (ec.category() == http::make_error_code(http::error::bad_method).category())
      return send(Response::error(400, "malformed HTTP request: " + ec.message()), false);
    if (ec) {
      spdlog::debug("connection from {} (cn={}) ended: {}", peer_, cn_,
                    describe_tls_error(ec, stream_.native_handle()));
      return;
    }
    send(route(), req.keep_alive());
  }

  Response route() {
    auto& req = parser_->get();
    const auto& allowed = shared_.options.allowed_client_cns;
    const auto& peer = shared_.options.peer_prefix;
    const bool peer_route = !peer.empty() && target_.starts_with(peer);
    if (!peer_route && !allowed.empty() && std::find(allowed.begin(), allowed.end(), cn_) == allowed.end())
      return Response::error(403, "client '" + cn_ + "' is not allowed here");
    if (target_.empty() || target_.front() != '/')
      return Response::error(400, "request target must be an absolute path");
    Request request;
    request.method = method_;
    request.target = target_;
    const auto q = target_.find('?');
    request.path = target_.substr(0, q);
    request.query = q == std::string::npos ? std::string{} : target_.substr(q + 1);
    request.body = std::move(req.body());
    request.client_cn = cn_;
    return shared_.router.dispatch(request);
  }

  // By value: a staged file's chunk (Response::raw, up to 64 MiB) is moved into the reply, not copied.
  void send(Response r, bool keep_alive) {
    response_ = {};
    response_.version(11);
    response_.result(r.status);
    response_.set(http::field::server, "tandem");
    for (const auto& [name, value] : r.headers) response_.set(name, value);
    if (r.raw) {
      response_.set(http::field::content_type, "application/octet-stream");
      response_.body() = std::move(*r.raw);
    } else if (r.status != 204) {
      response_.set(http::field::content_type, "application/json");
      // Replace, not throw, on invalid UTF-8: a log tail must not turn a reply into a 500.
      response_.body() = r.body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      response_.body() += '\n';
    }
    response_.keep_alive(keep_alive);
    response_.prepare_payload();
    arm_timer(shared_.options.io_timeout);
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->on_write(ec);
                      });
  }

  void on_write(beast::error_code ec) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
    spdlog::info("{} {} {} cn={} {}ms peer={}{}", method_, target_, response_.result_int(), cn_,
                 ms, peer_, ec ? " (reply not delivered: " + ec.message() + ")" : "");
    if (ec) return;
    if (draining_) return drain();
    if (!response_.keep_alive()) return shutdown();
    read();
  }

  void drain() {
    arm_timer(shared_.options.io_timeout);
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > kDrainLimit) return self->shutdown();
                              self->drain();
                            });
  }

  void shutdown() {
    arm_timer(std::min<std::chrono::milliseconds>(shared_.options.io_timeout,
                                                  std::chrono::seconds(5)));
    stream_.async_shutdown([self = shared_from_this()](beast::error_code) {});
  }

  beast::ssl_stream<beast::tcp_stream> stream_;
  const Shared& shared_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::size_t body_limit_ = 0;  // this request's (ServerOptions: body_limit, or large_body_limit by prefix)
  http::response<http::string_body> response_;
  std::string peer_, cn_, method_, target_;
  Clock::time_point started_;
  bool draining_ = false;
  std::size_t drained_ = 0;
  std::array<char, 16 * 1024> scratch_{};
};

}  // namespace

struct HttpsServer::Impl {
  Shared shared;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer backoff{ioc};
  std::vector<std::thread> threads;
  std::uint16_t port = 0;

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        std::make_shared<Session>(std::move(s), shared)->run();
        return accept();
      }
      // Out of descriptors and the like: pause instead of spinning on the same error.
      spdlog::warn("accept on port {} failed: {}", port, ec.message());
      backoff.expires_after(std::chrono::milliseconds(100));
      backoff.async_wait([this](beast::error_code) { accept(); });
    });
  }

  Status listen() {
    const std::string where = host_port(shared.options.address, shared.options.port);
    beast::error_code ec;
    const auto address = asio::ip::make_address(shared.options.address, ec);
    if (ec) return Error{where + ": not an IP address: " + ec.message()};
    const tcp::endpoint ep{address, shared.options.port};
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Error{where + ": cannot listen: " + ec.message()};
    port = acceptor.local_endpoint().port();
    return {};
  }
};

HttpsServer::HttpsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpsServer::~HttpsServer() { stop(); }

std::uint16_t HttpsServer::port() const { return impl_->port; }

Result<std::unique_ptr<HttpsServer>> HttpsServer::start(ServerOptions options, Router router) {
  auto impl = std::make_unique<Impl>();
  impl->shared.options = std::move(options);
  impl->shared.router = std::move(router);
  const auto& o = impl->shared.options;
  if (Status s = configure_mtls(impl->shared.ssl.native_handle(), TlsRole::server, o.ca_file,
                                o.cert_file, o.key_file);
      !s)
    return s.error().with_context("HTTPS server");
  if (Status s = impl->listen(); !s) return s.error().with_context("HTTPS server");
  impl->accept();
  for (unsigned i = 0; i < std::max(1U, o.threads); ++i)
    impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
  spdlog::info("HTTPS server listening on {}:{} (mutual TLS, CA {})", o.address, impl->port,
               o.ca_file.string());
  return std::unique_ptr<HttpsServer>(new HttpsServer(std::move(impl)));
}

void HttpsServer::stop() {
  if (!impl_ || impl_->threads.empty()) return;
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace tandem::net
