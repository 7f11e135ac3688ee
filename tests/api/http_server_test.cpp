// The engine's HTTP server with a real TCP client: plain answers, keep-alive, streaming in
// chunks from another thread, disconnect noticed mid-stream, oversize and malformed requests.
#include <doctest/doctest.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <stdexcept>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>
#include <chrono>
#include <thread>

#include "http_server.hpp"

using namespace tandem::engine::api;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

HttpServerOptions small_body() {
  HttpServerOptions o;
  o.body_limit = 1024;
  return o;
}

struct Fixture {
  std::atomic<int> closes{0};
  std::atomic<bool> stream_stopped{false};
  std::unique_ptr<HttpServer> server;
  std::mutex mu;
  std::vector<std::thread> producers;  // joined before the server goes: Responders must not outlive it

  explicit Fixture(HttpServerOptions o = small_body()) {
    std::string err;
    server = HttpServer::start(o, [this](const HttpRequest& r, std::shared_ptr<Responder> out) { handle(r, out); }, err);
    REQUIRE_MESSAGE(server, err);
  }
  ~Fixture() {
    std::lock_guard lock(mu);
    for (auto& t : producers) t.join();
  }
  void spawn(std::function<void()> f) {
    std::lock_guard lock(mu);
    producers.emplace_back(std::move(f));
  }

  void handle(const HttpRequest& r, const std::shared_ptr<Responder>& out) {
    if (r.path == "/echo") return out->send(200, "text/plain", r.method + " " + r.body + " " + r.query);
    if (r.path == "/throw") throw std::runtime_error("a handler bug");
    if (r.path == "/stream") {
      out->begin_stream("text/event-stream");
      spawn([out] {
        for (int i = 0; i < 3; ++i) out->write("data: " + std::to_string(i) + "\n\n");
        out->write("data: [DONE]\n\n");
        out->end();
      });
      return;
    }
    if (r.path == "/forever") {
      out->on_close([this] { ++closes; });
      out->begin_stream("text/event-stream");
      spawn([this, out] {
        for (int i = 0; i < 500 && !out->closed(); ++i) {
          out->write("data: tick\n\n");
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        stream_stopped = true;
      });
      return;
    }
    out->send(404, "application/json", "{}");
  }
};

std::string raw_exchange(std::uint16_t port, const std::string& bytes) {
  asio::io_context ioc;
  tcp::socket s(ioc);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(bytes));
  std::string out;
  beast::error_code ec;
  char buf[4096];
  for (;;) {
    std::size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

}  // namespace

TEST_CASE("plain request and keep-alive reuse of one connection") {
  Fixture f;
  asio::io_context ioc;
  beast::tcp_stream s(ioc);
  s.connect(tcp::endpoint{asio::ip::make_address("127.0.0.1"), f.server->port()});
  for (int i = 0; i < 2; ++i) {
    http::request<http::string_body> req{http::verb::post, "/echo?x=1", 11};
    req.body() = "hello" + std::to_string(i);
    req.keep_alive(true);
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer b;
    http::response<http::string_body> res;
    http::read(s, b, res);
    CHECK(res.result_int() == 200);
    CHECK(res.body() == "POST hello" + std::to_string(i) + " x=1");
  }
}

TEST_CASE("streaming: chunks written from another thread arrive in order") {
  Fixture f;
  std::string out = raw_exchange(f.server->port(), "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(out.find("Transfer-Encoding: chunked") != std::string::npos);
  auto p0 = out.find("data: 0"), p2 = out.find("data: 2"), done = out.find("data: [DONE]");
  CHECK(p0 != std::string::npos);
  CHECK(p0 < p2);
  CHECK(p2 < done);
  CHECK(out.substr(out.size() - 5) == "0\r\n\r\n");
}

TEST_CASE("a client that leaves mid-stream is noticed and the producer stops") {
  Fixture f;
  {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.connect({asio::ip::make_address("127.0.0.1"), f.server->port()});
    asio::write(s, asio::buffer(std::string("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")));
    char buf[256];
    s.read_some(asio::buffer(buf));
  }  // socket closed here
  for (int i = 0; i < 300 && !f.stream_stopped; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(f.stream_stopped);
  CHECK(f.closes == 1);
}

TEST_CASE("oversize body gets 413, garbage gets 400, and the server keeps serving") {
  // The 413 names the setting through name_settings, as tandem-serve maps fields to its flags.
  HttpServerOptions o = small_body();
  o.name_settings = [](std::string_view m) {
    std::string s(m);
    const std::string field = "`max_request_body`";
    if (auto at = s.find(field); at != std::string::npos) s.replace(at, field.size(), "--max-request-body");
    return s;
  };
  Fixture f(o);
  std::string big(4096, 'x');
  std::string r413 = raw_exchange(f.server->port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n" + big);
  CHECK(r413.rfind("HTTP/1.1 413", 0) == 0);
  CHECK(r413.find("bytes, --max-request-body)") != std::string::npos);
  std::string r400 = raw_exchange(f.server->port(), "NOT HTTP AT ALL\r\n\r\n");
  CHECK(r400.rfind("HTTP/1.1 400", 0) == 0);
  std::string ok = raw_exchange(f.server->port(), "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200", 0) == 0);
}

namespace {

using Clock = std::chrono::steady_clock;

// Reads until the server closes the connection (or 5 s pass): what came back and how long it took.
std::pair<std::string, double> read_until_closed(tcp::socket& s) {
  const auto t0 = Clock::now();
  std::string out;
  char buf[4096];
  s.non_blocking(true);
  while (Clock::now() - t0 < std::chrono::seconds(5)) {
    beast::error_code ec;
    const std::size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec == asio::error::would_block) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (ec) break;
  }
  return {out, std::chrono::duration<double>(Clock::now() - t0).count()};
}

HttpServerOptions quick_timeouts() {
  HttpServerOptions o;
  o.header_timeout = std::chrono::milliseconds(300);
  o.idle_timeout = std::chrono::milliseconds(300);
  o.body_timeout = std::chrono::milliseconds(300);
  return o;
}

}  // namespace

TEST_CASE("a handler that throws is answered 500 in OpenAI's shape, and the server keeps serving") {
  std::vector<std::string> logged;
  std::mutex log_mu;
  HttpServerOptions o = small_body();
  o.log = [&](const std::string& line) {
    std::lock_guard lk(log_mu);
    logged.push_back(line);
  };
  Fixture f(o);
  const std::string r = raw_exchange(f.server->port(), "GET /throw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(r.rfind("HTTP/1.1 500", 0) == 0);
  CHECK(r.find(R"("type":"internal_server_error")") != std::string::npos);
  {
    std::lock_guard lk(log_mu);
    REQUIRE(logged.size() == 1);
    CHECK(logged[0].find("a handler bug") != std::string::npos);
  }
  CHECK(raw_exchange(f.server->port(), "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("slowloris: headers that never finish are cut at the header timeout") {
  Fixture f(quick_timeouts());
  asio::io_context ioc;
  tcp::socket s(ioc);
  s.connect({asio::ip::make_address("127.0.0.1"), f.server->port()});
  asio::write(s, asio::buffer(std::string("GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")));
  auto [out, seconds] = read_until_closed(s);
  CHECK(out.empty());
  CHECK(seconds >= 0.25);
  CHECK(seconds < 3.0);
}

TEST_CASE("an idle kept-alive connection is closed at the idle timeout; a trickling body at the body timeout") {
  Fixture f(quick_timeouts());
  {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.connect({asio::ip::make_address("127.0.0.1"), f.server->port()});
    asio::write(s, asio::buffer(std::string("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")));
    auto [out, seconds] = read_until_closed(s);
    CHECK(out.rfind("HTTP/1.1 200", 0) == 0);  // answered, then kept open until the idle timeout
    CHECK(seconds >= 0.25);
    CHECK(seconds < 3.0);
  }
  {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.connect({asio::ip::make_address("127.0.0.1"), f.server->port()});
    asio::write(s, asio::buffer(std::string("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")));
    auto [out, seconds] = read_until_closed(s);
    CHECK(out.empty());
    CHECK(seconds < 3.0);
  }
}

TEST_CASE("connections beyond the per-client cap are answered 503; a freed place is given again") {
  HttpServerOptions o;
  o.max_connections_per_client = 2;
  Fixture f(o);
  asio::io_context ioc;
  std::vector<std::unique_ptr<tcp::socket>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<tcp::socket>(ioc));
    held.back()->connect({asio::ip::make_address("127.0.0.1"), f.server->port()});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both accepted
  tcp::socket third(ioc);
  third.connect({asio::ip::make_address("127.0.0.1"), f.server->port()});
  auto [refused, seconds] = read_until_closed(third);
  CHECK(refused.rfind("HTTP/1.1 503", 0) == 0);
  // No name_settings: the reply names the field.
  CHECK(refused.find("the limit per client (`max_connections_per_client`)") != std::string::npos);
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server sees the close
  CHECK(raw_exchange(f.server->port(), "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("headers beyond the header limit are answered 431") {
  Fixture f;
  const std::string r = raw_exchange(f.server->port(), "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  CHECK(r.rfind("HTTP/1.1 431", 0) == 0);
}
