// The Beast side of HttpClient. One Exchange is one connection, plain or TLS: every step runs
// asynchronously on a private io_context so that tcp_stream's deadline bounds it, and the caller
// still sees one blocking call.
#include "tandem/net/http_client.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <limits>
#include <optional>

#include "blocking_step.hpp"
#include "tandem/url.hpp"
#include "tls_context.hpp"

namespace tandem::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct HttpClient::Impl {
  ClientOptions options;
  std::optional<ssl::context> tls;  // set when options.tls
};

namespace {

// A plain connection's failure in words (a TLS one has describe_tls_error).
std::string describe_plain(beast::error_code ec) {
  if (ec == beast::error::timeout) return "timed out";
  if (ec == http::error::end_of_stream || ec == asio::error::eof) return "the server closed the connection";
  if (ec == http::error::partial_message) return "the server closed the connection mid-reply";
  return ec.message();
}

std::chrono::milliseconds left_until(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// One connection to one endpoint, plain or TLS.
class Exchange {
 public:
  Exchange(HttpClient::Impl& client, const Endpoint& ep)
      : o_(client.options), ep_(ep), where_(host_port(ep.host, ep.port)) {
    if (client.tls) tls_.emplace(ioc_, *client.tls);
  }

  const std::string& where() const { return where_; }
  bool tls() const { return tls_.has_value(); }
  beast::tcp_stream& tcp_layer() { return tls_ ? beast::get_lowest_layer(*tls_) : plain_; }

  // start(stream, done) on whichever stream this connection is.
  template <class Start>
  beast::error_code run(Start&& start) {
    return run_step(ioc_, [&](auto done) {
      if (tls_) start(*tls_, done);
      else start(plain_, done);
    });
  }

  Error fail(const std::string& step, beast::error_code ec) {
    if (!tls_) return Error{where_ + ": " + step + ": " + describe_plain(ec)};
    const std::string why = describe_tls_error(ec, tls_->native_handle());
    // Under TLS 1.3 the server judges our certificate after our side of the handshake is done,
    // so its refusal arrives as an alert on a later read; say what it means rather than where.
    if (why.starts_with("peer sent TLS alert")) return Error{where_ + ": the server refused this client: " + why};
    return Error{where_ + ": " + step + " failed: " + why};
  }

  Status open() {
    // SNI lets a node that serves several names pick the right certificate.
    // SSL_set_tlsext_host_name without its C cast; OpenSSL copies the name.
    if (tls_ && !ep_.node_name.empty() &&
        SSL_ctrl(tls_->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                 const_cast<char*>(ep_.node_name.c_str())) != 1)
      return Error{where_ + ": cannot set SNI '" + ep_.node_name + "'"};
    if (auto f = resolve_and_connect(ioc_, tcp_layer(), ep_.host, ep_.port, o_.connect_timeout)) return fail(f.step, f.ec);
    if (!tls_) return {};
    tcp_layer().expires_after(o_.handshake_timeout);
    beast::error_code ec = run_step(ioc_, [&](auto done) { tls_->async_handshake(ssl::stream_base::client, done); });
    if (ec) return fail("TLS handshake", ec);
    // The CA proves the certificate is ours; the CN proves it is the node we meant to reach.
    const std::string cn = peer_common_name(tls_->native_handle());
    if (cn != ep_.node_name) return Error{where_ + ": server certificate is for '" + cn + "', expected node '" + ep_.node_name + "'"};
    return {};
  }

  Status send(const std::string& method, const std::string& target, const std::string& body,
              std::chrono::milliseconds timeout, bool keep_alive = false) {
    http::request<http::string_body> req;
    const http::verb verb = http::string_to_verb(method);
    if (verb == http::verb::unknown) req.method_string(method);
    else req.method(verb);
    req.target(target);
    req.version(11);
    // An agent is addressed by its node name; a serving port by host:port.
    req.set(http::field::host, tls_ ? (ep_.node_name.empty() ? ep_.host : ep_.node_name) : where_);
    req.set(http::field::user_agent, "tandemctl");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.keep_alive(keep_alive);
    req.body() = body;
    req.prepare_payload();
    tcp_layer().expires_after(timeout);
    beast::error_code ec = run([&](auto& s, auto done) { http::async_write(s, req, done); });
    if (ec) return fail(tls_ ? "sending the request" : "sending " + method + " " + target, ec);
    return {};
  }

  void close(std::chrono::milliseconds timeout) {
    if (tls_) {
      // A polite close; the answer is already in hand, so its outcome does not matter.
      tcp_layer().expires_after(std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2)));
      run_step(ioc_, [&](auto done) { tls_->async_shutdown(done); });
      return;
    }
    beast::error_code ec;
    plain_.socket().shutdown(tcp::socket::shutdown_both, ec);
    plain_.close();
  }

 private:
  const ClientOptions& o_;
  const Endpoint& ep_;
  std::string where_;
  asio::io_context ioc_;
  beast::tcp_stream plain_{ioc_};
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls_;
};

}  // namespace

// ---- SSE framing ----

bool SseDecoder::line(std::string l, const std::function<bool(const std::string&)>& on_data) {
  if (!l.empty() && l.back() == '\r') l.pop_back();
  if (l.empty()) {  // the blank line ends an event
    if (!has_data_) return true;
    std::string d = std::move(data_);
    data_.clear();
    has_data_ = false;
    return on_data(d);
  }
  if (l.front() == ':') return true;  // a comment (keep-alive)
  const auto colon = l.find(':');
  const std::string field = l.substr(0, colon);
  if (field != "data") return true;  // event:, id:, retry: carry nothing the callers use
  std::string value = colon == std::string::npos ? "" : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.erase(0, 1);
  if (has_data_) data_ += '\n';
  data_ += value;
  has_data_ = true;
  return true;
}

bool SseDecoder::feed(const std::string& bytes, const std::function<bool(const std::string&)>& on_data) {
  pending_ += bytes;
  std::size_t at = 0;
  for (auto nl = pending_.find('\n', at); nl != std::string::npos; nl = pending_.find('\n', at)) {
    std::string l = pending_.substr(at, nl - at);
    at = nl + 1;
    if (!line(std::move(l), on_data)) {
      pending_.erase(0, at);
      return false;
    }
  }
  pending_.erase(0, at);
  return true;
}

bool SseDecoder::finish(const std::function<bool(const std::string&)>& on_data) {
  if (!pending_.empty()) {
    std::string l = std::move(pending_);
    pending_.clear();
    if (!line(std::move(l), on_data)) return false;
  }
  return line("", on_data);
}

// ---- the client ----

HttpClient::HttpClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;
HttpClient& HttpClient::operator=(HttpClient&&) noexcept = default;

Result<HttpClient> HttpClient::create(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.tls) {
    impl->tls.emplace(ssl::context::tls_client);
    if (Status s = configure_mtls(impl->tls->native_handle(), TlsRole::client, options.ca_file, options.cert_file,
                                  options.key_file);
        !s)
      return s.error().with_context("HTTPS client");
  }
  return HttpClient(std::move(impl));
}

Result<ClientResponse> HttpClient::request(const Endpoint& ep, const std::string& method, const std::string& target,
                                           const std::string& body) const {
  return request(ep, method, target, body, impl_->options.io_timeout);
}

namespace {

// Writes one request on an open connection and reads the whole reply, under one deadline.
// `keep_alive`: the reply's own wish (the server may still close after it).
Result<ClientResponse> exchange_once(Exchange& x, std::size_t response_limit, const std::string& method,
                                     const std::string& target, const std::string& body,
                                     std::chrono::milliseconds io_timeout, bool keep_alive, bool& server_keeps) {
  if (Status s = x.send(method, target, body, io_timeout, keep_alive); !s) return s.error();
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(response_limit);
  // The header first, so a large body (a staged file's chunk) is read into one allocation of its
  // announced length instead of a string grown and copied as it arrives.
  beast::error_code ec = x.run([&](auto& s, auto done) { http::async_read_header(s, buffer, parser, done); });
  if (!ec) {
    if (auto n = parser.content_length(); n && *n <= response_limit)
      parser.get().body().reserve(static_cast<std::size_t>(*n));
    ec = x.run([&](auto& s, auto done) { http::async_read(s, buffer, parser, done); });
  }
  if (ec) return x.fail(x.tls() ? "reading the response" : "reading the reply to " + method + " " + target, ec);
  auto res = parser.release();
  server_keeps = res.keep_alive();
  std::string type(res[http::field::content_type]);
  return ClientResponse{res.result_int(), std::move(res.body()), std::move(type)};
}

}  // namespace

Result<ClientResponse> HttpClient::request(const Endpoint& ep, const std::string& method, const std::string& target,
                                           const std::string& body, std::chrono::milliseconds io_timeout) const {
  Exchange x(*impl_, ep);
  if (Status s = x.open(); !s) return s.error();
  bool keeps = false;
  auto r = exchange_once(x, impl_->options.response_limit, method, target, body, io_timeout, false, keeps);
  if (r) x.close(io_timeout);
  return r;
}

// ---- a kept connection ----

struct KeptConnection::State {
  HttpClient::Impl* client;
  Endpoint ep;  // Exchange keeps a reference: it lives here, beside it
  std::unique_ptr<Exchange> x;
};

KeptConnection::KeptConnection(const HttpClient& client, Endpoint ep)
    : s_(new State{client.impl_.get(), std::move(ep), nullptr}) {}

KeptConnection::~KeptConnection() {
  if (s_ && s_->x) s_->x->close(std::chrono::seconds(1));
}

Result<ClientResponse> KeptConnection::request(const std::string& method, const std::string& target,
                                               const std::string& body, std::chrono::milliseconds io_timeout) {
  for (;;) {
    const bool fresh = !s_->x;
    if (fresh) {
      s_->x = std::make_unique<Exchange>(*s_->client, s_->ep);
      if (Status st = s_->x->open(); !st) {
        s_->x.reset();
        return st.error();
      }
    }
    bool keeps = false;
    auto r = exchange_once(*s_->x, s_->client->options.response_limit, method, target, body, io_timeout, true, keeps);
    if (r) {
      if (!keeps) {
        s_->x->close(io_timeout);
        s_->x.reset();
      }
      return r;
    }
    s_->x.reset();
    // A reused connection may have been closed by the server while it sat idle: one more try on a
    // new one. A new connection that fails is the answer.
    if (fresh) return r.error();
  }
}

Result<StreamEnd> HttpClient::stream_sse(const Endpoint& ep, const std::string& target, const std::string& body,
                                         const std::function<bool(const std::string&)>& on_event,
                                         std::chrono::milliseconds io_timeout,
                                         std::chrono::milliseconds total_timeout) const {
  Exchange x(*impl_, ep);
  if (Status s = x.open(); !s) return s.error();
  const auto deadline = Clock::now() + total_timeout;
  if (Status s = x.send("POST", target, body, std::min(io_timeout, left_until(deadline))); !s) return s.error();

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // consumed as it arrives
  x.tcp_layer().expires_after(std::min(io_timeout, left_until(deadline)));
  beast::error_code ec = x.run([&](auto& s, auto done) { http::async_read_header(s, buffer, parser, done); });
  if (ec) return x.fail("waiting for the reply to POST " + target, ec);

  StreamEnd end;
  end.status = parser.get().result_int();
  const std::string type(parser.get()[http::field::content_type]);
  if (end.status != 200 || type.rfind("text/event-stream", 0) != 0) {
    // An error document (or a server that ignored "stream"): read it whole for the caller.
    parser.body_limit(impl_->options.response_limit);
    x.tcp_layer().expires_after(std::min(io_timeout, left_until(deadline)));
    ec = x.run([&](auto& s, auto done) { http::async_read(s, buffer, parser, done); });
    if (ec) return x.fail("reading the HTTP " + std::to_string(end.status) + " reply to POST " + target, ec);
    end.body = std::move(parser.get().body());
    x.close(io_timeout);
    return end;
  }

  SseDecoder decoder;
  auto deliver = [&](const std::string& data) {
    if (data == "[DONE]") {
      end.saw_done = true;
      return false;  // nothing follows [DONE]
    }
    ++end.events;
    if (!on_event(data)) {
      end.stopped = true;
      return false;
    }
    return true;
  };
  const auto too_long = [&] {
    return Error{x.where() + ": the stream did not end within " + std::to_string(total_timeout.count() / 1000) + " s (" +
                 std::to_string(end.events) + " events read)"};
  };
  bool more = true;
  while (more && !parser.is_done()) {
    const auto left = left_until(deadline);
    if (left.count() == 0) return too_long();
    x.tcp_layer().expires_after(std::min(io_timeout, left));
    ec = x.run([&](auto& s, auto done) { http::async_read_some(s, buffer, parser, done); });
    if (ec) {
      if (ec == beast::error::timeout && left <= io_timeout) return too_long();
      Error e = x.fail("reading the event stream", ec);
      e.message += " (after " + std::to_string(end.events) + " events)";
      return e;
    }
    std::string chunk = std::move(parser.get().body());
    parser.get().body().clear();
    more = decoder.feed(chunk, deliver);
  }
  if (more) decoder.finish(deliver);
  x.close(io_timeout);
  return end;
}

}  // namespace tandem::net
