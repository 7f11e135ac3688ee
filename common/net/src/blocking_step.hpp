// One blocking call made of asynchronous Beast/Asio steps: each step runs on a private io_context
// until it (and the stream's deadline) is done, so tcp_stream's expiry bounds it. Shared by the
// mTLS client (https_client.cpp) and the controller's plain-HTTP client (http_client.cpp).
#pragma once
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>

#include <chrono>
#include <string>

namespace tandem::net {

// Starts one asynchronous operation and runs the io_context until it is done.
template <class Start>
boost::beast::error_code run_step(boost::asio::io_context& ioc, Start&& start) {
  boost::beast::error_code result;
  start([&result](boost::beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

// What failed: "resolving the host" or "connecting", with the error; empty `step` on success.
struct ConnectFailure {
  const char* step = nullptr;
  boost::beast::error_code ec;
  explicit operator bool() const { return step != nullptr; }
};

// Resolves host:port and connects `stream` to the first address that answers within `timeout`.
inline ConnectFailure resolve_and_connect(boost::asio::io_context& ioc, boost::beast::tcp_stream& stream,
                                          const std::string& host, int port, std::chrono::milliseconds timeout) {
  using tcp = boost::asio::ip::tcp;
  tcp::resolver resolver(ioc);
  tcp::resolver::results_type addresses;
  boost::beast::error_code ec = run_step(ioc, [&](auto done) {
    resolver.async_resolve(host, std::to_string(port), [&addresses, done](boost::beast::error_code e, tcp::resolver::results_type r) {
      addresses = std::move(r);
      done(e);
    });
  });
  if (ec) return {"resolving the host", ec};
  stream.expires_after(timeout);
  ec = run_step(ioc, [&](auto done) { stream.async_connect(addresses, done); });
  if (ec) return {"connecting", ec};
  return {};
}

}  // namespace tandem::net
