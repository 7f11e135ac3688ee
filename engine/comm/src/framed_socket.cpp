#include "framed_socket.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <array>

namespace tandem::comm::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr std::uint32_t kMagic = 0x4D444E54;  // "TNDM"
// Nothing a rank sends is near this; a larger length means the stream is not ours.
constexpr std::uint64_t kMaxPayload = std::uint64_t{1} << 34;

struct Header {
  std::uint32_t magic;
  std::uint32_t kind;
  std::uint64_t length;
};
static_assert(sizeof(Header) == 16);

}  // namespace

std::string describe(const error_code& ec) {
  if (ec == asio::error::eof) return "the connection was closed (the peer exited or hung up)";
  if (ec == asio::error::connection_reset) return "the connection was reset (the peer exited)";
  return ec.message();
}

const char* to_string(FrameKind k) {
  switch (k) {
    case FrameKind::hello: return "hello";
    case FrameKind::welcome: return "welcome";
    case FrameKind::refuse: return "refuse";
    case FrameKind::reduce: return "all-reduce";
    case FrameKind::gather: return "all-gather";
    case FrameKind::broadcast: return "broadcast";
  }
  return "unknown";
}

FramedSocket::FramedSocket(asio::io_context& io, asio::ip::tcp::socket socket, std::string peer)
    : io_(io), socket_(std::move(socket)), peer_(std::move(peer)) {
  error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
}

void FramedSocket::limit_unacked(std::chrono::milliseconds limit) {
  const unsigned int ms = static_cast<unsigned int>(limit.count());
  (void)::setsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);  // best effort: Linux only
}

Status FramedSocket::send(FrameKind kind, const void* data, std::size_t bytes, std::chrono::milliseconds timeout) {
  const Header h{kMagic, static_cast<std::uint32_t>(kind), bytes};
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(&h, sizeof h), asio::buffer(data, bytes)};
  return run_with_deadline(
      io_, socket_, timeout, [&](auto handler) { asio::async_write(socket_, buffers, handler); },
      std::string("sending ") + to_string(kind) + " to " + peer_);
}

Result<Frame> FramedSocket::receive(FrameKind expect, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string what = std::string("waiting for ") + to_string(expect) + " from " + peer_;
  Header h{};
  if (auto s = run_with_deadline(
          io_, socket_, timeout, [&](auto handler) { asio::async_read(socket_, asio::buffer(&h, sizeof h), handler); }, what);
      !s)
    return s.error();
  if (h.magic != kMagic || h.length > kMaxPayload)
    return Error{what + ": the stream does not carry tandem frames (bad magic or length)"};
  Frame f;
  f.kind = static_cast<FrameKind>(h.kind);
  if (f.kind == FrameKind::refuse) {
    std::string why;
    if (h.length <= 4096) {
      why.resize(h.length);
      if (!run_with_deadline(
              io_, socket_, std::chrono::milliseconds(1000),
              [&](auto handler) { asio::async_read(socket_, asio::buffer(why), handler); }, what))
        why = "(no reason given)";
    }
    return Error{peer_ + " refused: " + why};
  }
  if (f.kind != expect)
    return Error{what + ": got " + to_string(f.kind) + " instead (the ranks made different calls)"};
  f.payload.resize(h.length);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (auto s = run_with_deadline(
          io_, socket_, std::max(left, std::chrono::milliseconds(1)),
          [&](auto handler) { asio::async_read(socket_, asio::buffer(f.payload), handler); }, what);
      !s)
    return s.error();
  return f;
}

void FramedSocket::close() {
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace tandem::comm::detail
