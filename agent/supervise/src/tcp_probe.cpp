#include "tandem/supervise/tcp_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace tandem::supervise {

Result<bool> port_accepts(const std::string& host_in, int port, Duration timeout) {
  std::string host = host_in;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return Error{"resolve " + host + ": " + ::gai_strerror(rc)};
  bool accepted = false;
  for (addrinfo* ai = res; ai && !accepted; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int c = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (c == 0) {
      accepted = true;
    } else if (errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int ms = static_cast<int>(std::max<long long>(1, timeout.count()));
      if (::poll(&pfd, 1, ms) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        accepted = err == 0;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return accepted;
}

}  // namespace tandem::supervise
