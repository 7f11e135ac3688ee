// One blocking call made of asynchronous Beast/Asio steps: each step runs on a private io_context
// until it (and the stream's deadline) is done, so tcp_stream's expiry bounds it. The HTTP client's
// (http_client.cpp) building blocks.
#pragma once
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>

#include <chrono>
#include <string>
#include <vector>

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

// The addresses of host:port, within `timeout`. An IP literal needs no lookup. A name is looked up
// on a thread of its own: getaddrinfo cannot be cancelled, and Asio's resolver would hold the
// caller (its io_context waits for the lookup when destroyed), so past the deadline the lookup is
// left to end by itself and its answer is dropped. Fails with beast::error::timeout then.
boost::beast::error_code resolve_bounded(const std::string& host, int port, std::chrono::milliseconds timeout,
                                         std::vector<boost::asio::ip::tcp::endpoint>& out);

// Resolves host:port (bounded by `timeout`) and connects `stream` to the first address that answers
// within `timeout`.
ConnectFailure resolve_and_connect(boost::asio::io_context& ioc, boost::beast::tcp_stream& stream,
                                   const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace tandem::net
