// A bare TCP client for the tests that must not speak TLS (plaintext, silent clients).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

namespace tandem::test {

class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return connected_; }
  void send_all(const std::string& data) const {
    (void)::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
  }
  // Everything the server sends until it closes, or until `seconds` pass without data.
  // `closed` says whether the server ended the connection.
  std::string read_until_close(int seconds, bool& closed) const {
    timeval tv{seconds, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string got;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        got.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      closed = n == 0 || errno == ECONNRESET;
      return got;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

}  // namespace tandem::test
