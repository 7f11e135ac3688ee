// One TCP connection between two ranks, carrying frames: a 16-byte header (magic, kind, payload
// length) and the payload. Every read and write has a deadline, so a peer that went quiet (a cut
// link, a stopped process) turns into an error instead of a hang; a closed connection is an error
// that says so.
#pragma once
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tandem/comm/communicator.hpp"

namespace tandem::comm::detail {

enum class FrameKind : std::uint32_t { hello = 1, welcome = 2, refuse = 3, reduce = 4, gather = 5, broadcast = 6 };
const char* to_string(FrameKind k);

struct Frame {
  FrameKind kind = FrameKind::hello;
  std::vector<std::uint8_t> payload;
};

class FramedSocket {
 public:
  FramedSocket(boost::asio::io_context& io, boost::asio::ip::tcp::socket socket, std::string peer);

  Status send(FrameKind kind, const void* data, std::size_t bytes, std::chrono::milliseconds timeout);
  Status send(FrameKind kind, const std::vector<std::uint8_t>& payload, std::chrono::milliseconds timeout) {
    return send(kind, payload.data(), payload.size(), timeout);
  }
  // Receives one frame; `expect` other than the frame's kind is a protocol error.
  Result<Frame> receive(FrameKind expect, std::chrono::milliseconds timeout);
  const std::string& peer() const { return peer_; }
  // Once the peer has said who it is (its hello), later errors name it so.
  void rename(std::string peer) { peer_ = std::move(peer); }
  // Data the peer has not acknowledged for `limit` ends the connection (TCP_USER_TIMEOUT). A cut
  // link gives no error of its own: writes keep landing in the kernel's buffer, so a head that
  // only sends (heartbeats to an idle worker) would never notice it lost its worker.
  void limit_unacked(std::chrono::milliseconds limit);
  // Closes the connection now, so that the peer hears of it at once instead of at its timeout.
  void close();

 private:
  boost::asio::io_context& io_;
  boost::asio::ip::tcp::socket socket_;
  std::string peer_;
};

// An I/O error in words an operator can act on.
std::string describe(const boost::system::error_code& ec);

// Runs `start` (which begins one asynchronous operation on `target`, a socket or an acceptor, with
// the handler it is given) on `io` for at most `timeout`, and cancels it when the time is up.
// `what` prefixes the error.
template <class Target, class Start>
Status run_with_deadline(boost::asio::io_context& io, Target& target, std::chrono::milliseconds timeout, Start&& start,
                         const std::string& what) {
  std::optional<boost::system::error_code> done;
  start([&done](const boost::system::error_code& ec, auto&&...) { done = ec; });
  io.restart();
  io.run_for(timeout);
  if (!done) {
    boost::system::error_code ignored;
    target.cancel(ignored);
    io.restart();
    io.run();  // the cancelled operation completes with operation_aborted
    return Error{what + ": nothing for " + std::to_string(timeout.count()) + " ms (the peer is gone or the link is down)"};
  }
  if (*done) return Error{what + ": " + describe(*done)};
  return Ok{};
}

}  // namespace tandem::comm::detail
