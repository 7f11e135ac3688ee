// A TCP port nothing listens on right now, for a server a test is about to start: the kernel's
// pick for an ephemeral bind on `addr`, released at once. "0.0.0.0" asks for one free on every
// address (agents of two test nodes listen on 127.0.0.1 and 127.0.0.2 with one port). The one copy
// of this for every test binary (tandem_add_test puts tests/support on the include path).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace tandem::test {

inline std::uint16_t free_port(const char* addr = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, addr, &a.sin_addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace tandem::test
