// The one HTTP client with TLS off (what the controller's probes, gates and bench use): against a
// one-shot server on loopback, over IPv4 and IPv6, with the Host header and messages it writes.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "tandem/net/http_client.hpp"

using namespace tandem;

namespace {

// Listens on a loopback address, answers one connection with `reply` and keeps what it was sent.
class OneShotServer {
 public:
  OneShotServer(bool ipv6, std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (ipv6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_loopback;
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof *a;
    }
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0 && ::listen(fd_, 1) == 0 &&
          ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0;
    if (!ok_) return;
    port_ = ntohs(ipv6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      while (request_.find("\r\n\r\n") == std::string::npos) {
        const auto n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        request_.append(buf, static_cast<std::size_t>(n));
      }
      (void)::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      ::shutdown(c, SHUT_RDWR);
      ::close(c);
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  bool ok() const { return ok_; }
  std::uint16_t port() const { return port_; }
  const std::string& request() {
    if (thread_.joinable()) thread_.join();
    return request_;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::uint16_t port_ = 0;
  std::string reply_;
  std::string request_;
  std::thread thread_;
};

net::HttpClient plain() {
  net::ClientOptions o;
  o.tls = false;
  o.connect_timeout = std::chrono::seconds(2);
  o.io_timeout = std::chrono::seconds(5);
  auto c = net::HttpClient::create(o);
  REQUIRE(c.ok());
  return std::move(c).value();
}

// The error of a failed call, "" otherwise (doctest also prints messages of checks that passed).
template <class T>
std::string why(const Result<T>& r) {
  return r ? std::string() : r.error().message;
}

const std::string kReply = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";

}  // namespace

TEST_CASE("plain HTTP over IPv4: the reply, and a Host header of host:port") {
  OneShotServer s(false, kReply);
  REQUIRE(s.ok());
  auto r = plain().request({"127.0.0.1", s.port(), {}}, "GET", "/health");
  REQUIRE_MESSAGE(r.ok(), why(r));
  CHECK(r->status == 200);
  CHECK(r->body == "hello");
  CHECK(s.request().rfind("GET /health HTTP/1.1\r\n", 0) == 0);
  CHECK(s.request().find("Host: 127.0.0.1:" + std::to_string(s.port()) + "\r\n") != std::string::npos);
}

TEST_CASE("plain HTTP over IPv6: the Host header and the messages bracket the address") {
  OneShotServer s(true, kReply);
  if (!s.ok()) {
    MESSAGE("skipped: no IPv6 loopback here");
    return;
  }
  auto r = plain().request({"::1", s.port(), {}}, "GET", "/v1/models");
  REQUIRE_MESSAGE(r.ok(), why(r));
  CHECK(r->body == "hello");
  CHECK(s.request().find("Host: [::1]:" + std::to_string(s.port()) + "\r\n") != std::string::npos);
}

TEST_CASE("no answer: the error says where and at which step") {
  std::uint16_t closed = 0;
  {
    OneShotServer s(false, kReply);  // a port that was just free, closed again when s goes
    REQUIRE(s.ok());
    closed = s.port();
    auto r = plain().request({"127.0.0.1", s.port(), {}}, "GET", "/");  // let it answer once
    CHECK(r.ok());
  }
  auto r = plain().request({"127.0.0.1", closed, {}}, "GET", "/health");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "127.0.0.1:" + std::to_string(closed) + ": connecting: Connection refused");
  // A name that cannot resolve fails at that step, within the connect bound.
  auto bad = plain().request({"no-such-host.invalid", 80, {}}, "GET", "/");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("no-such-host.invalid:80: resolving the host: ") == 0);
}

TEST_CASE("Server-Sent Events arrive one data event at a time, [DONE] ends them") {
  OneShotServer s(false,
                  "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                  ": keep-alive\n\ndata: {\"a\":1}\n\ndata: two\ndata: lines\r\n\r\ndata: [DONE]\n\n");
  REQUIRE(s.ok());
  std::vector<std::string> events;
  auto end = plain().stream_sse({"127.0.0.1", s.port(), {}}, "/v1/completions", "{}",
                                [&](const std::string& d) {
                                  events.push_back(d);
                                  return true;
                                },
                                std::chrono::seconds(5), std::chrono::seconds(10));
  REQUIRE_MESSAGE(end.ok(), why(end));
  CHECK(end->status == 200);
  CHECK(end->saw_done);
  CHECK(end->events == 2);
  CHECK(events == std::vector<std::string>{"{\"a\":1}", "two\nlines"});
}
