// Runs a function once per rank of a real TCP tensor-parallel group on loopback, one thread per
// rank (rank 0 listens on a free port; the others dial it), and collects what each returned.
#pragma once
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tandem/comm/tcp_communicator.hpp"

namespace tandem::comm::test {

inline TcpOptions group_options(int rank, int size, int port) {
  TcpOptions o;
  o.rank = rank;
  o.size = size;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.rendezvous_timeout = std::chrono::milliseconds(10000);
  o.peer_timeout = std::chrono::milliseconds(10000);
  o.fingerprint = "test";
  return o;
}

// body(comm) runs on every rank at once; results[r] is rank r's answer, or on_error(message) when
// the rank could not join the group.
template <class T>
std::vector<T> run_group(int size, const std::function<T(Communicator&)>& body, const std::function<T(const std::string&)>& on_error) {
  std::promise<int> port;
  auto port_ready = port.get_future().share();
  std::vector<std::future<T>> results;
  for (int r = 0; r < size; ++r) {
    results.push_back(std::async(std::launch::async, [&, r, port_ready]() -> T {
      TcpOptions o = group_options(r, size, r == 0 ? 0 : port_ready.get());
      if (r == 0) o.on_listening = [&port](int p) { port.set_value(p); };
      auto c = connect_tcp(o);
      if (!c) return on_error(c.error().message);
      return body(*c.value());
    }));
  }
  std::vector<T> out;
  for (auto& f : results) out.push_back(f.get());
  return out;
}

}  // namespace tandem::comm::test
