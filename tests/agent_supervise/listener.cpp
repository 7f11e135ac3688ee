// A stand-in engine rank for the supervisor tests:
//   tandem_test_listener PORT LISTEN_DELAY_MS [EXIT_AFTER_MS EXIT_CODE] [--ignore-term]
// prints a line, waits LISTEN_DELAY_MS, listens on 127.0.0.1:PORT and accepts until killed, or
// exits with EXIT_CODE EXIT_AFTER_MS after start (-1: never). --ignore-term makes stop escalate.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PORT LISTEN_DELAY_MS [EXIT_AFTER_MS EXIT_CODE] [--ignore-term]\n", argv[0]);
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const long delay_ms = std::atol(argv[2]);
  const long exit_after_ms = argc > 4 ? std::atol(argv[3]) : -1;
  const int exit_code = argc > 4 ? std::atoi(argv[4]) : 0;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--ignore-term") == 0) ::signal(SIGTERM, SIG_IGN);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  };
  std::printf("listener: starting, port %d in %ld ms\n", port, delay_ms);
  std::fflush(stdout);
  int fd = -1;
  for (;;) {
    if (exit_after_ms >= 0 && elapsed_ms() >= exit_after_ms) {
      std::printf("listener: exiting with %d\n", exit_code);
      return exit_code;
    }
    if (fd < 0 && elapsed_ms() >= delay_ms) {
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<unsigned short>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0) {
        std::perror("listener: bind/listen");
        return 3;
      }
      std::printf("listener: listening on %d\n", port);
      std::fflush(stdout);
    }
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10) == 1) ::close(::accept(fd, nullptr, nullptr));
    } else {
      ::usleep(5000);
    }
  }
}
