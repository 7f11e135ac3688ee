#include "blocking_step.hpp"

#include <boost/asio/connect.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

namespace tandem::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

boost::beast::error_code resolve_bounded(const std::string& host, int port, std::chrono::milliseconds timeout,
                                         std::vector<tcp::endpoint>& out) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    out = {tcp::endpoint(address, static_cast<unsigned short>(port))};
    return {};
  }
  // The lookup owns its state with the caller, so it may outlive a caller that stopped waiting.
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    boost::system::error_code ec;
    std::vector<tcp::endpoint> endpoints;
  };
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host, port] {
    asio::io_context ioc;
    tcp::resolver resolver(ioc);
    boost::system::error_code e;
    const auto results = resolver.resolve(host, std::to_string(port), e);
    std::lock_guard lock(lookup->mu);
    lookup->ec = e;
    for (const auto& r : results) lookup->endpoints.push_back(r.endpoint());
    lookup->done = true;
    lookup->cv.notify_all();
  }).detach();
  std::unique_lock lock(lookup->mu);
  if (!lookup->cv.wait_for(lock, timeout, [&] { return lookup->done; })) return boost::beast::error::timeout;
  if (lookup->ec) return lookup->ec;
  out = std::move(lookup->endpoints);
  return {};
}

ConnectFailure resolve_and_connect(asio::io_context& ioc, boost::beast::tcp_stream& stream, const std::string& host,
                                   int port, std::chrono::milliseconds timeout) {
  std::vector<tcp::endpoint> addresses;
  if (auto ec = resolve_bounded(host, port, timeout, addresses)) return {"resolving the host", ec};
  stream.expires_after(timeout);
  auto ec = run_step(ioc, [&](auto done) { stream.async_connect(addresses, done); });
  if (ec) return {"connecting", ec};
  return {};
}

}  // namespace tandem::net
