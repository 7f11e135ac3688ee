#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "tp_group.hpp"

using namespace tandem::comm;
using namespace tandem::comm::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {
std::vector<float> rank_values(int rank, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(static_cast<float>(i * (rank + 1))) * 1e3f + 0.1f * static_cast<float>(rank);
  return v;
}
}  // namespace

TEST_CASE("all-reduce sums in rank order and every rank gets the same bits") {
  for (int size : {2, 3}) {
    const int n = 10000;
    auto out = run_group<std::vector<float>>(
        size,
        [&](Communicator& c) {
          auto v = rank_values(c.rank(), n);
          auto s = c.all_reduce_sum(v);
          REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
          return v;
        },
        [](const std::string& e) {
          FAIL(e);
          return std::vector<float>{};
        });
    std::vector<float> expect = rank_values(0, n);
    for (int r = 1; r < size; ++r) {
      const auto v = rank_values(r, n);
      for (int i = 0; i < n; ++i) expect[static_cast<size_t>(i)] += v[static_cast<size_t>(i)];
    }
    for (int r = 0; r < size; ++r) CHECK(out[static_cast<size_t>(r)] == expect);
  }
}

TEST_CASE("all-gather concatenates uneven parts in rank order; broadcast carries rank 0's bytes") {
  auto out = run_group<std::vector<float>>(
      3,
      [](Communicator& c) {
        std::vector<float> mine(static_cast<size_t>(c.rank() + 1), static_cast<float>(c.rank()));
        auto all = c.all_gather(mine);
        REQUIRE(all.ok());
        std::vector<std::uint8_t> msg;
        if (c.rank() == 0) msg = {7, 8, 9};
        REQUIRE(c.broadcast(msg, 5s).ok());
        auto v = all.value();
        for (auto b : msg) v.push_back(static_cast<float>(b));
        return v;
      },
      [](const std::string& e) {
        FAIL(e);
        return std::vector<float>{};
      });
  const std::vector<float> expect{0, 1, 1, 2, 2, 2, 7, 8, 9};
  for (const auto& v : out) CHECK(v == expect);
}

TEST_CASE("a rendezvous nobody joins times out with the missing ranks named") {
  TcpOptions o = group_options(0, 2, 0);
  o.rendezvous_timeout = 300ms;
  const auto t0 = Clock::now();
  auto c = connect_tcp(o);
  REQUIRE_FALSE(c.ok());
  CHECK(Clock::now() - t0 < 5s);
  CHECK(c.error().message.find("rendezvous timed out") != std::string::npos);
  CHECK(c.error().message.find("rank(s) 1 never joined") != std::string::npos);

  TcpOptions w = group_options(1, 2, 1);  // port 1: nothing listens there
  w.rendezvous_timeout = 300ms;
  auto d = connect_tcp(w);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().message.find("rank 0 at 127.0.0.1:1 never admitted this rank") != std::string::npos);
}

TEST_CASE("a rank that loaded something else is refused, and both sides say why") {
  std::promise<int> port;
  auto head = std::async(std::launch::async, [&] {
    TcpOptions o = group_options(0, 2, 0);
    o.on_listening = [&](int p) { port.set_value(p); };
    return connect_tcp(o);
  });
  TcpOptions w = group_options(1, 2, port.get_future().get());
  w.fingerprint = "other-model";
  auto worker = connect_tcp(w);
  auto h = head.get();
  REQUIRE_FALSE(h.ok());
  REQUIRE_FALSE(worker.ok());
  CHECK(h.error().message.find("loaded something else") != std::string::npos);
  CHECK(worker.error().message.find("refused") != std::string::npos);
  CHECK(worker.error().message.find("loaded something else") != std::string::npos);
}

TEST_CASE("a peer that goes away ends the other rank's collective at once, and the group stays broken") {
  auto out = run_group<std::string>(
      2,
      [](Communicator& c) -> std::string {
        std::vector<float> v(4, 1.f);
        REQUIRE(c.all_reduce_sum(v).ok());
        if (c.rank() == 1) return "left";  // returning destroys rank 1's communicator: its socket closes
        const auto t0 = Clock::now();
        auto s = c.all_reduce_sum(v);
        const auto waited = Clock::now() - t0;
        CHECK(waited < 5s);  // the peer timeout is 10 s: the close was noticed, not waited out
        REQUIRE_FALSE(s.ok());
        auto again = c.all_reduce_sum(v);
        REQUIRE_FALSE(again.ok());
        CHECK(again.error().message == s.error().message);
        return s.error().message;
      },
      [](const std::string& e) { return "no group: " + e; });
  CHECK(out[1] == "left");
  CHECK(out[0].find("closed") != std::string::npos);
  CHECK(out[0].find("rank 0 of 2") != std::string::npos);
}

TEST_CASE("a peer that stays connected but silent is given up after the peer timeout") {
  std::promise<int> port;
  std::promise<void> done;
  auto silent = std::async(std::launch::async, [&] {
    TcpOptions o = group_options(1, 2, port.get_future().get());
    auto c = connect_tcp(o);
    REQUIRE(c.ok());
    done.get_future().wait();  // joined, then never takes part
  });
  TcpOptions o = group_options(0, 2, 0);
  o.peer_timeout = 400ms;
  o.on_listening = [&](int p) { port.set_value(p); };
  auto c = connect_tcp(o);
  REQUIRE(c.ok());
  std::vector<float> v(4, 1.f);
  const auto t0 = Clock::now();
  auto s = c.value()->all_reduce_sum(v);
  CHECK(Clock::now() - t0 < 3s);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message.find("nothing for 400 ms") != std::string::npos);
  done.set_value();
  silent.get();
}
