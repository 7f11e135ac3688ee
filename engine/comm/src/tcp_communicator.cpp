#include "tandem/comm/tcp_communicator.hpp"

#include <algorithm>
#include <cstring>
#include <boost/asio/connect.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "framed_socket.hpp"

namespace tandem::comm {

namespace asio = boost::asio;
using asio::ip::tcp;
using detail::FrameKind;
using detail::FramedSocket;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kProtocol = 1;

milliseconds left_until(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

std::string seconds(milliseconds ms) {
  const auto tenths = ms.count() / 100;
  return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") + " s";
}

std::string endpoint_str(const tcp::endpoint& e) { return e.address().to_string() + ":" + std::to_string(e.port()); }

class TcpGroup final : public TcpCommunicator {
 public:
  explicit TcpGroup(const TcpOptions& o)
      : o_(o), peers_(static_cast<size_t>(std::max(o.size, 1))), broken_(Error{"the tensor-parallel group has not formed yet"}) {}
  ~TcpGroup() override { close_all(); }

  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }

  Status rendezvous() override {
    if (joined_) return Ok{};
    broken_.reset();
    auto s = o_.size == 1 ? Status(Ok{}) : o_.rank == 0 ? accept_ranks() : join_rank0();
    joined_ = s.ok();
    return s;
  }

  Status all_reduce_sum(std::span<float> data) override {
    if (broken_) return *broken_;
    const std::size_t bytes = data.size_bytes();
    if (o_.rank != 0) {
      if (auto s = peers_[0]->send(FrameKind::reduce, data.data(), bytes, o_.peer_timeout); !s) return fail(s.error());
      auto f = peers_[0]->receive(FrameKind::reduce, o_.peer_timeout);
      if (!f) return fail(f.error());
      if (f->payload.size() != bytes) return fail(Error{"all-reduce: rank 0 sent back a sum of another size"});
      std::memcpy(data.data(), f->payload.data(), bytes);
      return Ok{};
    }
    for (int r = 1; r < o_.size; ++r) {
      auto f = peers_[static_cast<size_t>(r)]->receive(FrameKind::reduce, o_.peer_timeout);
      if (!f) return fail(f.error());
      if (f->payload.size() != bytes)
        return fail(Error{"all-reduce: rank " + std::to_string(r) + " sent " + std::to_string(f->payload.size() / 4) +
                          " floats, this rank has " + std::to_string(data.size()) + " (the ranks run different models?)"});
      const auto* theirs = reinterpret_cast<const float*>(f->payload.data());
      for (std::size_t i = 0; i < data.size(); ++i) data[i] += theirs[i];
    }
    for (int r = 1; r < o_.size; ++r)
      if (auto s = peers_[static_cast<size_t>(r)]->send(FrameKind::reduce, data.data(), bytes, o_.peer_timeout); !s)
        return fail(s.error());
    return Ok{};
  }

  Result<std::vector<float>> all_gather(std::span<const float> mine) override {
    if (broken_) return *broken_;
    if (o_.rank != 0) {
      if (auto s = peers_[0]->send(FrameKind::gather, mine.data(), mine.size_bytes(), o_.peer_timeout); !s)
        return fail(s.error()).error();
      auto f = peers_[0]->receive(FrameKind::gather, o_.peer_timeout);
      if (!f) return fail(f.error()).error();
      std::vector<float> all(f->payload.size() / sizeof(float));
      std::memcpy(all.data(), f->payload.data(), all.size() * sizeof(float));
      return all;
    }
    std::vector<float> all(mine.begin(), mine.end());
    for (int r = 1; r < o_.size; ++r) {
      auto f = peers_[static_cast<size_t>(r)]->receive(FrameKind::gather, o_.peer_timeout);
      if (!f) return fail(f.error()).error();
      const auto* theirs = reinterpret_cast<const float*>(f->payload.data());
      all.insert(all.end(), theirs, theirs + f->payload.size() / sizeof(float));
    }
    for (int r = 1; r < o_.size; ++r)
      if (auto s = peers_[static_cast<size_t>(r)]->send(FrameKind::gather, all.data(), all.size() * sizeof(float), o_.peer_timeout);
          !s)
        return fail(s.error()).error();
    return all;
  }

  Status broadcast(std::vector<std::uint8_t>& message, milliseconds wait) override {
    if (broken_) return *broken_;
    if (o_.rank != 0) {
      auto f = peers_[0]->receive(FrameKind::broadcast, wait);
      if (!f) return fail(f.error());
      message = std::move(f->payload);
      return Ok{};
    }
    for (int r = 1; r < o_.size; ++r)
      if (auto s = peers_[static_cast<size_t>(r)]->send(FrameKind::broadcast, message, o_.peer_timeout); !s)
        return fail(s.error());
    return Ok{};
  }

 private:
  void log(const std::string& line) const {
    if (o_.log) o_.log(line);
  }

  // How long a link may hold unacknowledged data before it counts as cut: a third of the peer
  // timeout (at least 3 s), the silence after which an idle worker gives up on its head, so both
  // ends of a cut link end in about the same time.
  milliseconds unacked_limit() const { return std::max(milliseconds(3000), o_.peer_timeout / 3); }

  // The first failure breaks the group for good; closing every link tells the other ranks now.
  Status fail(Error e) {
    if (!broken_) broken_ = Error{"tensor-parallel group (rank " + std::to_string(o_.rank) + " of " + std::to_string(o_.size) +
                                  "): " + e.message};
    close_all();
    return *broken_;
  }
  void close_all() {
    for (auto& p : peers_)
      if (p) p->close();
  }

  std::string hello() const {
    return nlohmann::json{{"protocol", kProtocol}, {"rank", o_.rank}, {"size", o_.size}, {"fingerprint", o_.fingerprint}}.dump();
  }

  // Why rank 0 cannot admit a rank that said `text`; empty when it can.
  std::string check_hello(const std::string& text, int& rank) const {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object() || !j.contains("rank") || !j.contains("size") || !j.contains("fingerprint"))
      return "its hello is not a tandem rank's hello";
    if (j.value("protocol", 0) != kProtocol)
      return "it speaks protocol " + std::to_string(j.value("protocol", 0)) + ", this rank " + std::to_string(kProtocol);
    rank = j["rank"].get<int>();
    const int size = j["size"].get<int>();
    if (size != o_.size)
      return "it expects a group of " + std::to_string(size) + " ranks, rank 0 of " + std::to_string(o_.size) +
             " (`tensor_parallel_size` / `nnodes` differ between the ranks)";
    if (rank < 1 || rank >= o_.size) return "its rank " + std::to_string(rank) + " is not in 1.." + std::to_string(o_.size - 1);
    if (peers_[static_cast<size_t>(rank)]) return "rank " + std::to_string(rank) + " has already joined";
    if (j["fingerprint"].get<std::string>() != o_.fingerprint)
      return "it loaded something else (fingerprint " + j["fingerprint"].get<std::string>() + ", rank 0 has " + o_.fingerprint +
             "): the model directories or flags differ between the ranks";
    return {};
  }

  Status accept_ranks() {
    const auto deadline = Clock::now() + o_.rendezvous_timeout;
    tcp::acceptor acceptor(io_);
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(o_.master_addr, ec);
    if (ec) return Error{"rendezvous: `master_addr` '" + o_.master_addr + "' is not an IP address"};
    const tcp::endpoint where(address, static_cast<unsigned short>(o_.master_port));
    acceptor.open(where.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(where, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Error{"rendezvous: cannot listen on " + endpoint_str(where) + ": " + ec.message()};
    const auto bound = acceptor.local_endpoint();
    if (o_.on_listening) o_.on_listening(bound.port());
    log("rendezvous: waiting for " + std::to_string(o_.size - 1) + " rank(s) on " + endpoint_str(bound) + " (timeout " +
        seconds(o_.rendezvous_timeout) + ")");

    for (int joined = 0; joined < o_.size - 1;) {
      tcp::socket socket(io_);
      if (auto s = detail::run_with_deadline(
              io_, acceptor, left_until(deadline), [&](auto handler) { acceptor.async_accept(socket, handler); }, "rendezvous");
          !s) {
        std::string missing;
        for (int r = 1; r < o_.size; ++r)
          if (!peers_[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        return fail(Error{"rendezvous timed out after " + seconds(o_.rendezvous_timeout) + " on " + endpoint_str(bound) +
                          ": rank(s) " + missing + " never joined (is the headless worker running, and can it reach this address?)"});
      }
      boost::system::error_code peer_ec;
      const std::string peer = "rank at " + endpoint_str(socket.remote_endpoint(peer_ec));
      auto link = std::make_unique<FramedSocket>(io_, std::move(socket), peer);
      auto hello = link->receive(FrameKind::hello, std::min(left_until(deadline), milliseconds(5000)));
      if (!hello) {
        log("rendezvous: ignoring a connection from " + peer + ": " + hello.error().message);
        continue;  // a port scanner or a health probe; not a rank
      }
      int rank = -1;
      const std::string text(hello->payload.begin(), hello->payload.end());
      if (const std::string why = check_hello(text, rank); !why.empty()) {
        (void)link->send(FrameKind::refuse, why.data(), why.size(), milliseconds(2000));  // best effort: we fail anyway
        return fail(Error{"rendezvous: refused the " + peer + ": " + why});
      }
      log("rendezvous: rank " + std::to_string(rank) + " joined from " + peer.substr(8));
      link->rename("rank " + std::to_string(rank) + " at " + peer.substr(8));  // a lost link names the rank
      link->limit_unacked(unacked_limit());
      peers_[static_cast<size_t>(rank)] = std::move(link);
      ++joined;
    }
    const std::string welcome = nlohmann::json{{"size", o_.size}}.dump();
    for (int r = 1; r < o_.size; ++r)
      if (auto s = peers_[static_cast<size_t>(r)]->send(FrameKind::welcome, welcome.data(), welcome.size(), o_.peer_timeout); !s)
        return fail(s.error());
    log("rendezvous: all " + std::to_string(o_.size) + " ranks joined");
    return Ok{};
  }

  Status join_rank0() {
    const auto deadline = Clock::now() + o_.rendezvous_timeout;
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(o_.master_addr, ec);
    if (ec) return Error{"rendezvous: `master_addr` '" + o_.master_addr + "' is not an IP address"};
    const tcp::endpoint head(address, static_cast<unsigned short>(o_.master_port));
    log("rendezvous: dialing rank 0 at " + endpoint_str(head) + " (timeout " + seconds(o_.rendezvous_timeout) + ")");
    std::string last = "no attempt";
    while (true) {
      if (left_until(deadline) == milliseconds(0))
        return fail(Error{"rendezvous timed out after " + seconds(o_.rendezvous_timeout) + ": rank 0 at " + endpoint_str(head) +
                          " never admitted this rank (last attempt: " + last + ")"});
      tcp::socket socket(io_);
      auto connected = detail::run_with_deadline(
          io_, socket, std::min(left_until(deadline), milliseconds(2000)),
          [&](auto handler) { socket.async_connect(head, handler); }, "connecting to " + endpoint_str(head));
      if (!connected) {
        last = connected.error().message;
        std::this_thread::sleep_for(std::min(left_until(deadline), milliseconds(200)));
        continue;
      }
      auto link = std::make_unique<FramedSocket>(io_, std::move(socket), "rank 0 at " + endpoint_str(head));
      const std::string hi = hello();
      if (auto s = link->send(FrameKind::hello, hi.data(), hi.size(), left_until(deadline)); !s) {
        last = s.error().message;
        continue;
      }
      auto welcome = link->receive(FrameKind::welcome, std::max(left_until(deadline), milliseconds(1)));
      if (!welcome) return fail(Error{"rendezvous: " + welcome.error().message});
      link->limit_unacked(unacked_limit());
      peers_[0] = std::move(link);
      log("rendezvous: joined rank 0 at " + endpoint_str(head) + " as rank " + std::to_string(o_.rank) + " of " +
          std::to_string(o_.size));
      return Ok{};
    }
  }

  TcpOptions o_;
  asio::io_context io_;
  std::vector<std::unique_ptr<FramedSocket>> peers_;  // rank 0: index = peer rank; others: [0] = rank 0
  std::optional<Error> broken_;
  bool joined_ = false;
};

}  // namespace

Result<std::unique_ptr<TcpCommunicator>> make_tcp_communicator(const TcpOptions& options) {
  if (options.size < 1) return Error{"tensor-parallel size must be at least 1"};
  if (options.rank < 0 || options.rank >= options.size)
    return Error{"rank " + std::to_string(options.rank) + " is outside a group of " + std::to_string(options.size)};
  return std::unique_ptr<TcpCommunicator>(std::make_unique<TcpGroup>(options));
}

Result<std::unique_ptr<Communicator>> connect_tcp(const TcpOptions& options) {
  auto c = make_tcp_communicator(options);
  if (!c) return c.error();
  if (auto s = c.value()->rendezvous(); !s) return s.error();
  return std::unique_ptr<Communicator>(std::move(c).value());
}

}  // namespace tandem::comm
