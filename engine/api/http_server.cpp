#include "http_server.hpp"
#include "http_request.hpp"

#include <sys/socket.h>  // recv, MSG_PEEK, MSG_DONTWAIT

#include <cerrno>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace tandem::engine::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One connection. Requests are read with Beast; responses are written as raw bytes through a
// queue on the connection's strand, which makes streamed chunks from the engine thread safe.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<const Handler> handler, std::size_t body_limit)
      : socket_(std::move(socket)), strand_(asio::make_strand(socket_.get_executor())), handler_(std::move(handler)),
        body_limit_(body_limit) {}

  void start() { asio::dispatch(strand_, [self = shared_from_this()] { self->read(); }); }

  // Called through Responder; all of these hop onto the strand.
  void queue(std::string bytes, bool last) {
    asio::post(strand_, [self = shared_from_this(), bytes = std::move(bytes), last]() mutable {
      if (self->closed_) return;
      self->out_.push_back({std::move(bytes), last});
      if (self->out_.size() == 1) self->flush();
    });
  }
  bool closed() const { return closed_; }
  void set_on_close(std::function<void()> cb) {
    asio::post(strand_, [self = shared_from_this(), cb = std::move(cb)]() mutable {
      if (self->closed_ && !self->finished_) cb();
      else self->on_close_ = std::move(cb);
    });
  }
  void mark_streaming() {
    asio::post(strand_, [self = shared_from_this()] {
      self->streaming_ = true;
      self->watch_for_disconnect();
    });
  }

 private:
  struct Out {
    std::string bytes;
    bool last;
  };

  void read() {
    parser_.emplace();
    configure_request_parser(*parser_, body_limit_);
    http::async_read(socket_, buffer_, *parser_,
                     asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_read(ec);
                     }));
  }

  void on_read(beast::error_code ec);
  void watch_for_disconnect() {
    // While a response is being produced, the socket turning readable with EOF (or a reset)
    // means the client left. Only done when no further request will be read on this connection
    // (streams and Connection: close), since a wait beside Beast's own read can steal its wake-up.
    // The peek never blocks: the strand must stay free for writes.
    if (watching_) return;
    watching_ = true;
    socket_.async_wait(tcp::socket::wait_read, asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code) {
      self->watching_ = false;
      if (self->finished_ || self->closed_) return;
      // Plain recv: Asio's own receive would poll (block) on EWOULDBLOCK for a blocking socket.
      char probe;
      const ssize_t n = ::recv(self->socket_.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_for_disconnect();
      if (n <= 0) self->close();
      // n > 0: the client sent more (a pipelined request); it is alive, stop watching.
    }));
  }

  void flush() {
    asio::async_write(socket_, asio::buffer(out_.front().bytes),
                      asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec || self->closed_) {
                          self->out_.clear();  // only now: the write that used the front buffer is over
                          return self->close();
                        }
                        const bool last = self->out_.front().last;
                        self->out_.pop_front();
                        if (last) return self->after_response();
                        if (!self->out_.empty()) self->flush();
                      }));
  }

  void after_response() {
    finished_ = true;
    if (keep_alive_ && !streaming_) {
      finished_ = false;
      on_close_ = nullptr;
      read();
    } else {
      beast::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_both, ec);
      socket_.close(ec);
    }
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    socket_.close(ec);  // a write in flight completes with an error and clears the queue
    if (!finished_ && on_close_) {
      auto cb = std::move(on_close_);
      cb();
    }
  }

  tcp::socket socket_;
  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<const Handler> handler_;
  std::size_t body_limit_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  std::deque<Out> out_;
  bool keep_alive_ = false;
  bool streaming_ = false;
  bool finished_ = false;
  bool watching_ = false;
  std::atomic<bool> closed_{false};
  std::function<void()> on_close_;
};

class ResponderImpl : public Responder {
 public:
  explicit ResponderImpl(std::shared_ptr<Session> s, bool keep_alive) : s_(std::move(s)), keep_alive_(keep_alive) {}

  void send(unsigned status, const std::string& content_type, std::string body) override {
    if (started_.exchange(true)) return;
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "tandem-serve");
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    s_->queue(os.str(), true);
  }
  void begin_stream(const std::string& content_type) override {
    if (started_.exchange(true)) return;
    s_->queue("HTTP/1.1 200 OK\r\nServer: tandem-serve\r\nContent-Type: " + content_type +
                  "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
              false);
    s_->mark_streaming();
  }
  void write(std::string chunk) override {
    if (chunk.empty()) return;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
    s_->queue(size + chunk + "\r\n", false);
  }
  void end() override { s_->queue("0\r\n\r\n", true); }
  bool closed() const override { return s_->closed(); }
  void on_close(std::function<void()> cb) override { s_->set_on_close(std::move(cb)); }

 private:
  std::shared_ptr<Session> s_;
  bool keep_alive_;
  std::atomic<bool> started_{false};
};

void Session::on_read(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    ResponderImpl(shared_from_this(), false)
        .send(413, "application/json",
              R"({"error":{"message":"request body too large","type":"invalid_request_error","code":413}})");
    return;
  }
  if (ec) {
    if (ec != http::error::end_of_stream && ec != asio::error::eof) {
      ResponderImpl(shared_from_this(), false)
          .send(400, "application/json",
                R"({"error":{"message":"malformed HTTP request","type":"invalid_request_error","code":400}})");
    } else {
      close();
    }
    return;
  }
  auto msg = parser_->release();
  keep_alive_ = msg.keep_alive();
  HttpRequest req = to_http_request(std::move(msg));
  streaming_ = false;
  finished_ = false;
  auto responder = std::make_shared<ResponderImpl>(shared_from_this(), keep_alive_);
  if (!keep_alive_) watch_for_disconnect();
  (*handler_)(req, responder);
}

class ServerImpl : public HttpServer {
 public:
  ServerImpl(Handler handler, std::size_t body_limit)
      : handler_(std::make_shared<const Handler>(std::move(handler))), body_limit_(body_limit) {}

  bool listen(const HttpServerOptions& o, std::string& error) {
    beast::error_code ec;
    auto addr = asio::ip::make_address(o.address, ec);
    if (ec) return error = "bad listen address '" + o.address + "': " + ec.message(), false;
    tcp::endpoint ep{addr, o.port};
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return error = "cannot listen on " + o.address + ":" + std::to_string(o.port) + ": " + ec.message(), false;
    port_ = acceptor_.local_endpoint().port();
    accept();
    for (unsigned i = 0; i < std::max(1u, o.threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
    return true;
  }
  ~ServerImpl() override { stop(); }
  std::uint16_t port() const override { return port_; }
  void stop() override {
    if (stopped_.exchange(true)) return;
    ioc_.stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void accept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (!ec) std::make_shared<Session>(std::move(socket), handler_, body_limit_)->start();
      if (!stopped_) accept();
    });
  }

  asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  std::shared_ptr<const Handler> handler_;
  std::size_t body_limit_;
  std::uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

std::unique_ptr<HttpServer> HttpServer::start(const HttpServerOptions& opts, Handler handler, std::string& error) {
  auto s = std::make_unique<ServerImpl>(std::move(handler), opts.body_limit);
  if (!s->listen(opts, error)) return nullptr;
  return s;
}

}  // namespace tandem::engine::api
