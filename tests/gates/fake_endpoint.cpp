#include "fake_endpoint.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sstream>

namespace tandem::fake {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Endpoint::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::atomic<bool> stopping{false};
  std::thread accept_thread;
  std::mutex mu;
  std::vector<std::thread> connections;
};

namespace {

void write_raw(tcp::socket& s, const std::string& bytes) {
  beast::error_code ec;
  asio::write(s, asio::buffer(bytes), ec);
}

std::string chunk(const std::string& data) {
  std::ostringstream o;
  o << std::hex << data.size() << "\r\n" << data << "\r\n";
  return o.str();
}

void serve_one(tcp::socket sock, const Handler& handler, std::atomic<int>& count) {
  beast::error_code ec;
  beast::flat_buffer buf;
  http::request<http::string_body> req;
  http::read(sock, buf, req, ec);
  if (ec) return;
  ++count;
  const Reply r = handler(Request{std::string(req.method_string()), std::string(req.target()), req.body()});
  switch (r.kind) {
    case Reply::Kind::close_now:
      break;
    case Reply::Kind::stall:
      std::this_thread::sleep_for(r.stall_for);
      break;
    case Reply::Kind::whole: {
      http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
      res.set(http::field::content_type, r.content_type);
      res.keep_alive(false);
      res.body() = r.body;
      res.prepare_payload();
      http::write(sock, res, ec);
      break;
    }
    case Reply::Kind::stream: {
      write_raw(sock, "HTTP/1.1 " + std::to_string(r.status) +
                          " OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
      std::size_t sent = 0;
      bool dropped = false;
      for (const auto& e : r.events) {
        if (sent == r.drop_after) {
          dropped = true;
          break;
        }
        if (r.gap.count() > 0) std::this_thread::sleep_for(r.gap);
        write_raw(sock, chunk("data: " + e + "\n\n"));
        ++sent;
      }
      if (!dropped && r.drop_after == SIZE_MAX) {
        if (r.done) write_raw(sock, chunk("data: [DONE]\n\n"));
        write_raw(sock, "0\r\n\r\n");
      }
      break;
    }
  }
  sock.shutdown(tcp::socket::shutdown_both, ec);
  sock.close(ec);
}

}  // namespace

Endpoint::Endpoint(Handler handler) : handler_(std::move(handler)), impl_(std::make_unique<Impl>()) {
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  impl_->accept_thread = std::thread([this] {
    for (;;) {
      beast::error_code ec;
      tcp::socket s(impl_->io);
      impl_->acceptor.accept(s, ec);
      if (impl_->stopping) break;
      if (ec) continue;
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->connections.emplace_back(serve_one, std::move(s), std::cref(handler_), std::ref(requests_));
    }
  });
}

Endpoint::~Endpoint() {
  impl_->stopping = true;
  {  // wake the blocking accept with a connection of our own
    asio::io_context io;
    tcp::socket s(io);
    beast::error_code ec;
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
  }
  impl_->accept_thread.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& t : impl_->connections) t.join();
}

nlohmann::json chat_completion(const std::string& content, const std::string& finish_reason, int prompt_tokens,
                               int completion_tokens) {
  return {{"id", "chatcmpl-fake"},
          {"object", "chat.completion"},
          {"model", "tiny-glm"},
          {"choices",
           {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", content}}}, {"finish_reason", finish_reason}}}},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

}  // namespace tandem::fake
