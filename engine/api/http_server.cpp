#include "http_server.hpp"
#include "http_request.hpp"

#include <sys/socket.h>  // recv, MSG_PEEK, MSG_DONTWAIT

#include <cerrno>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
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

// A message of the server's own, its settings named as the operator knows them.
std::string named_settings(const HttpServerOptions& o, const std::string& message) {
  return o.name_settings ? o.name_settings(message) : message;
}

std::string error_body(unsigned status, const std::string& message, const char* type) {
  const nlohmann::json j = {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Open connections, counted in all and per client address. A slot is a token whose destruction
// (when its Session ends) gives the place back.
class ConnectionLimits : public std::enable_shared_from_this<ConnectionLimits> {
 public:
  ConnectionLimits(unsigned total, unsigned per_client) : total_(total), per_client_(per_client) {}

  std::shared_ptr<void> admit(const std::string& client, std::string& why) {
    std::lock_guard lk(mu_);
    if (open_ >= total_) {
      why = "the server has " + std::to_string(open_) + " connections open, its limit (`max_connections`)";
      return nullptr;
    }
    unsigned& mine = per_client_open_[client];
    if (mine >= per_client_) {
      why = client + " has " + std::to_string(mine) + " connections open, the limit per client (`max_connections_per_client`)";
      return nullptr;
    }
    ++open_;
    ++mine;
    // The token keeps the counts alive: a Session may be destroyed after the server (in the
    // io_context's destructor, or by a Responder that outlived it).
    return std::shared_ptr<void>(static_cast<void*>(this), [self = shared_from_this(), client](void*) { self->release(client); });
  }

 private:
  void release(const std::string& client) {
    std::lock_guard lk(mu_);
    --open_;
    auto it = per_client_open_.find(client);
    if (it != per_client_open_.end() && --it->second == 0) per_client_open_.erase(it);
  }

  const unsigned total_, per_client_;
  std::mutex mu_;
  unsigned open_ = 0;
  std::map<std::string, unsigned> per_client_open_;
};

struct SessionConfig {
  std::shared_ptr<const Handler> handler;
  HttpServerOptions options;
};

// One connection. Requests are read with Beast; responses are written as raw bytes through a
// queue on the connection's strand, which makes streamed chunks from the engine thread safe.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `refusal`: not empty when the connection is over a limit; it is answered 503 and closed.
  Session(tcp::socket socket, std::shared_ptr<const SessionConfig> config, std::shared_ptr<void> slot,
          std::string refusal)
      : socket_(std::move(socket)), strand_(asio::make_strand(socket_.get_executor())), timer_(strand_),
        config_(std::move(config)), slot_(std::move(slot)), refusal_(std::move(refusal)) {}

  void start();

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

  // Headers first, under the header (or, between kept-alive requests, the idle) deadline; then the
  // body under its own. Nothing is timed while the handler works or a response streams.
  void read() {
    parser_.emplace();
    configure_request_parser(*parser_, config_->options);
    arm_deadline(first_request_ ? config_->options.header_timeout : config_->options.idle_timeout);
    first_request_ = false;
    http::async_read_header(socket_, buffer_, *parser_,
                            asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              self->on_header(ec);
                            }));
  }
  void on_header(beast::error_code ec) {
    if (ec || parser_->is_done()) return on_read(ec);
    arm_deadline(config_->options.body_timeout);
    http::async_read(socket_, buffer_, *parser_,
                     asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code e, std::size_t) {
                       self->on_read(e);
                     }));
  }
  void arm_deadline(std::chrono::milliseconds after) {
    const std::uint64_t generation = ++deadline_generation_;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      // A timeout closes the socket, which ends the read in flight with an error.
      if (!ec && generation == self->deadline_generation_) self->close();
    });
  }
  void cancel_deadline() {
    ++deadline_generation_;
    timer_.cancel();
  }

  void on_read(beast::error_code ec);
  void dispatch(const HttpRequest& req, const std::shared_ptr<Responder>& responder);
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
    cancel_deadline();
    beast::error_code ec;
    socket_.close(ec);  // a write in flight completes with an error and clears the queue
    if (!finished_ && on_close_) {
      auto cb = std::move(on_close_);
      cb();
    }
  }

  tcp::socket socket_;
  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  std::uint64_t deadline_generation_ = 0;
  std::shared_ptr<const SessionConfig> config_;
  std::shared_ptr<void> slot_;  // this connection's place under the limits, given back with the Session
  std::string refusal_;
  bool first_request_ = true;
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

void Session::start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (self->refusal_.empty()) return self->read();
    ResponderImpl(self, false).send(503, "application/json", error_body(503, self->refusal_, "service_unavailable"));
  });
}

void Session::on_read(beast::error_code ec) {
  cancel_deadline();
  if (closed_) return;  // the deadline passed: the connection is gone
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    ResponderImpl(shared_from_this(), false)
        .send(413, "application/json",
              error_body(413, named_settings(config_->options, "request body too large (limit " +
                                                                      std::to_string(config_->options.body_limit) +
                                                                      " bytes, `max_request_body`)"),
                         "invalid_request_error"));
    return;
  }
  if (ec == http::error::header_limit) {
    keep_alive_ = false;
    ResponderImpl(shared_from_this(), false)
        .send(431, "application/json",
              error_body(431, "request line and headers too large (limit " +
                                  std::to_string(config_->options.header_limit) + " bytes)", "invalid_request_error"));
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
  dispatch(req, responder);
}

// The one guard around every handler: whatever a handler lets escape (each cause is also fixed
// where it arises) is logged and answered 500, and the server goes on serving.
void Session::dispatch(const HttpRequest& req, const std::shared_ptr<Responder>& responder) {
  std::string what;
  try {
    (*config_->handler)(req, responder);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "a non-standard exception";
  }
  const auto& log = config_->options.log;
  const std::string line = "error: the handler for " + req.method + " " + req.path.substr(0, 128) + " threw: " + what;
  if (log) log(line);
  else std::fprintf(stderr, "%s\n", line.c_str());
  // Ignored if the handler had already begun its answer (Responder takes only the first).
  responder->send(500, "application/json", error_body(500, "internal error while handling the request", "internal_server_error"));
}

class ServerImpl : public HttpServer {
 public:
  ServerImpl(Handler handler, const HttpServerOptions& options)
      : config_(std::make_shared<const SessionConfig>(
            SessionConfig{std::make_shared<const Handler>(std::move(handler)), options})),
        limits_(std::make_shared<ConnectionLimits>(std::max(1u, options.max_connections),
                                                   std::max(1u, options.max_connections_per_client))) {}

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
      if (!ec) admit(std::move(socket));
      if (!stopped_) accept();
    });
  }
  void admit(tcp::socket socket) {
    beast::error_code ec;
    const auto peer = socket.remote_endpoint(ec);
    const std::string client = ec ? std::string("?") : peer.address().to_string();
    std::string why;
    auto slot = limits_->admit(client, why);
    if (!slot) why = named_settings(config_->options, why);
    if (!slot) {
      // Logged at most once a second: a flood must not become a flood of log lines too.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_refusal_log_.load() > std::chrono::seconds(1)) {
        last_refusal_log_ = now;
        const std::string line = "warning: refusing a connection from " + client + ": " + why;
        if (config_->options.log) config_->options.log(line);
        else std::fprintf(stderr, "%s\n", line.c_str());
      }
    }
    std::make_shared<Session>(std::move(socket), config_, std::move(slot), slot ? std::string() : why)->start();
  }

  asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  std::shared_ptr<const SessionConfig> config_;
  std::shared_ptr<ConnectionLimits> limits_;
  std::atomic<std::chrono::steady_clock::time_point> last_refusal_log_{};
  std::uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopped_{false};
};

}  // namespace

std::unique_ptr<HttpServer> HttpServer::start(const HttpServerOptions& opts, Handler handler, std::string& error) {
  auto s = std::make_unique<ServerImpl>(std::move(handler), opts);
  if (!s->listen(opts, error)) return nullptr;
  return s;
}

}  // namespace tandem::engine::api
