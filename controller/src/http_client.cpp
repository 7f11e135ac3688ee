// The Beast side of the plain-HTTP client. Each step runs asynchronously on a private io_context
// so that tcp_stream's deadline bounds it, and the caller still sees one blocking call.
#include "http_client.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <limits>

#include "tandem/net/blocking_step.hpp"
#include "tandem/url.hpp"

namespace tandem::httpc {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using net::run_step;
using Clock = std::chrono::steady_clock;

// Split by the project's one URL reader (tandem/url.hpp); this adds only what a base URL of an
// OpenAI-compatible endpoint needs: plain HTTP, and the path kept as a prefix for every target.
Result<Url> Url::parse(const std::string& text) {
  auto parsed = parse_http_url(text);
  if (!parsed) return parsed.error().with_context("'" + text + "'");
  if (parsed->scheme == "https")
    return Error{"'" + text + "': https is not supported here; the serving port speaks plain HTTP (http://HOST:PORT)"};
  Url u;
  u.host = parsed->host;
  u.port = parsed->port_or_default();
  u.prefix = parsed->target;
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  return u;
}

std::string Url::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + prefix;
}

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

// ---- connection ----

namespace {

std::string describe(beast::error_code ec) {
  if (ec == beast::error::timeout) return "timed out";
  if (ec == http::error::end_of_stream || ec == asio::error::eof) return "the server closed the connection";
  if (ec == http::error::partial_message) return "the server closed the connection mid-reply";
  return ec.message();
}

struct Connection {
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  std::string where;

  Status open(const Url& url, const Options& o) {
    where = url.host + ":" + std::to_string(url.port);
    if (auto f = net::resolve_and_connect(ioc, stream, url.host, url.port, o.connect_timeout)) return fail(f.step, f.ec);
    return {};
  }

  Error fail(const std::string& step, beast::error_code ec) const { return Error{where + ": " + step + ": " + describe(ec)}; }

  Status send(const Url& url, const std::string& method, const std::string& target, const std::string& body,
              std::chrono::milliseconds timeout) {
    http::request<http::string_body> req;
    const http::verb verb = http::string_to_verb(method);
    if (verb == http::verb::unknown) req.method_string(method);
    else req.method(verb);
    req.target(url.prefix + target);
    req.version(11);
    req.set(http::field::host, url.host + ":" + std::to_string(url.port));
    req.set(http::field::user_agent, "tandemctl");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    req.keep_alive(false);
    req.body() = body;
    req.prepare_payload();
    stream.expires_after(timeout);
    beast::error_code ec = run_step(ioc, [&](auto done) { http::async_write(stream, req, done); });
    if (ec) return fail("sending " + method + " " + target, ec);
    return {};
  }

  void close() {
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream.close();
  }
};

std::chrono::milliseconds left_until(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

Result<Reply> request(const Url& url, const std::string& method, const std::string& target, const std::string& body,
                      const Options& o) {
  Connection c;
  if (Status s = c.open(url, o); !s) return s.error();
  const auto deadline = Clock::now() + o.io_timeout;
  if (Status s = c.send(url, method, target, body, o.io_timeout); !s) return s.error();
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(o.response_limit);
  c.stream.expires_after(left_until(deadline));
  beast::error_code ec = run_step(c.ioc, [&](auto done) { http::async_read(c.stream, buffer, parser, done); });
  if (ec) return c.fail("reading the reply to " + method + " " + target, ec);
  c.close();
  auto res = parser.release();
  return Reply{res.result_int(), std::move(res.body())};
}

Result<StreamEnd> stream_sse(const Url& url, const std::string& target, const std::string& body,
                             const std::function<bool(const std::string&)>& on_event, const Options& o) {
  Connection c;
  if (Status s = c.open(url, o); !s) return s.error();
  const auto deadline = Clock::now() + o.total_timeout;
  if (Status s = c.send(url, "POST", target, body, std::min(o.io_timeout, left_until(deadline))); !s) return s.error();

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // consumed as it arrives
  c.stream.expires_after(std::min(o.io_timeout, left_until(deadline)));
  beast::error_code ec = run_step(c.ioc, [&](auto done) { http::async_read_header(c.stream, buffer, parser, done); });
  if (ec) return c.fail("waiting for the reply to POST " + target, ec);

  StreamEnd end;
  end.status = parser.get().result_int();
  const std::string type(parser.get()[http::field::content_type]);
  if (end.status != 200 || type.rfind("text/event-stream", 0) != 0) {
    // An error document (or a server that ignored "stream"): read it whole for the caller.
    parser.body_limit(o.response_limit);
    c.stream.expires_after(std::min(o.io_timeout, left_until(deadline)));
    ec = run_step(c.ioc, [&](auto done) { http::async_read(c.stream, buffer, parser, done); });
    if (ec) return c.fail("reading the HTTP " + std::to_string(end.status) + " reply to POST " + target, ec);
    end.body = std::move(parser.get().body());
    c.close();
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
  bool more = true;
  while (more && !parser.is_done()) {
    const auto left = left_until(deadline);
    if (left.count() == 0)
      return Error{c.where + ": the stream did not end within " + std::to_string(o.total_timeout.count() / 1000) +
                   " s (" + std::to_string(end.events) + " events read)"};
    c.stream.expires_after(std::min(o.io_timeout, left));
    ec = run_step(c.ioc, [&](auto done) { http::async_read_some(c.stream, buffer, parser, done); });
    if (ec) {
      if (ec == beast::error::timeout && left <= o.io_timeout)
        return Error{c.where + ": the stream did not end within " + std::to_string(o.total_timeout.count() / 1000) +
                     " s (" + std::to_string(end.events) + " events read)"};
      return Error{c.where + ": reading the event stream: " + describe(ec) + " (after " + std::to_string(end.events) +
                   " events)"};
    }
    std::string chunk = std::move(parser.get().body());
    parser.get().body().clear();
    more = decoder.feed(chunk, deliver);
  }
  if (more) decoder.finish(deliver);
  c.close();
  return end;
}

}  // namespace tandem::httpc
