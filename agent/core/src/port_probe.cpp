#include "tandem/agent/port_probe.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "tandem/agent/fs.hpp"

namespace tandem::agent {
namespace {

bool connects(int family, int port) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int rc = -1;
  if (family == AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<std::uint16_t>(port));
    a.sin6_addr = in6addr_loopback;
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  ::close(fd);
  return rc == 0;
}

}  // namespace

std::vector<std::string> listeners_in_proc_net(const std::string& text, int port, bool v6) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string sl, local, remote, state;
    if (!(ls >> sl >> local >> remote >> state)) continue;
    auto colon = local.rfind(':');
    if (colon == std::string::npos || state != "0A") continue;
    int p = static_cast<int>(std::stoul(local.substr(colon + 1), nullptr, 16));
    if (p != port) continue;
    std::string addr = local.substr(0, colon);
    out.push_back((v6 ? "[" + addr + "]" : addr) + ":" + std::to_string(port));
  }
  return out;
}

Result<PortState> probe_port(const NodeRoot& root, int port) {
  PortState s;
  bool any_file = false;
  for (auto [host, v6] : {std::pair{"/proc/net/tcp", false}, std::pair{"/proc/net/tcp6", true}}) {
    auto real = root.resolve(host);
    if (!real) continue;
    auto text = read_file(*real);
    if (!text) continue;  // e.g. no IPv6 on this kernel
    any_file = true;
    for (auto& l : listeners_in_proc_net(*text, port, v6)) s.listeners.push_back(l);
  }
  if (any_file) {
    s.method = "proc_net_tcp";
    s.listening = !s.listeners.empty();
    return s;
  }
  s.method = "connect";
  s.listening = connects(AF_INET, port) || connects(AF_INET6, port);
  return s;
}

Result<nlohmann::json> wait_port_dark(const NodeRoot& root, int port, Duration timeout) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    auto s = probe_port(root, port);
    if (!s) return s.error();
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    nlohmann::json ev{{"port", port}, {"dark", !s->listening}, {"method", s->method}, {"waited_ms", waited.count()},
                      {"listeners", s->listeners}};
    if (!s->listening) return ev;
    if (waited >= timeout) {
      Error e = plain_error("", "port " + std::to_string(port) + " still has a listener after " + format_duration(timeout));
      set_evidence(e, ev);
      return e;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace tandem::agent
