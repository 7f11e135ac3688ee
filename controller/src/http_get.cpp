#include "http_get.hpp"

#include <utility>  // before Asio (Boost 1.74 + g++12 + C++20)

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tandem/url.hpp"

namespace tandem::ctl {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

Result<HttpAnswer> http_get(const std::string& url, std::chrono::milliseconds timeout) {
  // The project's one URL reader (tandem/url.hpp): a bracketed IPv6 host reaches the resolver
  // without its brackets, and a URL the manifest accepted is split the same way here.
  auto parsed = parse_http_url(url);
  if (!parsed) return parsed.error().with_context("'" + url + "'");
  if (parsed->scheme != "http") return Error{"'" + url + "': expected http://HOST:PORT/PATH (plain HTTP)"};
  const std::string& host = parsed->host;
  const std::string port = std::to_string(parsed->port_or_default());
  const std::string& target = parsed->target;
  const std::string hostport = parsed->authority();

  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code result;
  const std::string where = hostport;
  auto step = [&](const char* what) -> Status {
    ioc.restart();
    ioc.run();
    if (result) return Error{where + ": " + what + ": " + result.message()};
    return {};
  };
  asio::ip::tcp::resolver resolver(ioc);
  asio::ip::tcp::resolver::results_type addrs;
  resolver.async_resolve(host, port, [&](beast::error_code ec, asio::ip::tcp::resolver::results_type r) {
    result = ec;
    addrs = std::move(r);
  });
  if (auto s = step("resolving"); !s) return s.error();
  stream.expires_after(timeout);
  stream.async_connect(addrs, [&](beast::error_code ec, const auto&) { result = ec; });
  if (auto s = step("connecting"); !s) return s.error();
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, hostport);
  req.set(http::field::user_agent, "tandemctl");
  req.keep_alive(false);
  http::async_write(stream, req, [&](beast::error_code ec, std::size_t) { result = ec; });
  if (auto s = step("sending"); !s) return s.error();
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16 * 1024 * 1024);
  http::async_read(stream, buf, parser, [&](beast::error_code ec, std::size_t) { result = ec; });
  if (auto s = step("reading the answer"); !s) return s.error();
  auto res = parser.release();
  return HttpAnswer{res.result_int(), std::move(res.body())};
}

}  // namespace tandem::ctl
