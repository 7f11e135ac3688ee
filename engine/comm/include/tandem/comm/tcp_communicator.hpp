// Tensor-parallel ranks over TCP, for CPU ranks (the GPU back end uses NCCL). A star around rank 0:
// rank 0 listens at master_addr:master_port, every other rank dials it until the rendezvous
// deadline, says who it is (rank, group size, fingerprint of what it loaded) and is admitted or
// refused with a reason. Collectives go through rank 0, which sums and gathers in rank order.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tandem/comm/communicator.hpp"

namespace tandem::comm {

struct TcpOptions {
  int rank = 0;
  int size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                                   // rank 0 with 0: any free port (tests)
  std::chrono::milliseconds rendezvous_timeout{30000};   // the whole group must form within this
  std::chrono::milliseconds peer_timeout{20000};         // a collective waits at most this for a peer
  std::string fingerprint;                               // ranks must agree (model, group shape)
  std::function<void(const std::string&)> log;           // progress lines; silent when empty
  // Rank 0: called once the listener is bound, with the port it got (before anyone joined).
  std::function<void(int port)> on_listening;
};

// Knows its rank and size from the start (a model can load its slice), joins the group later.
class TcpCommunicator : public Communicator {
 public:
  // Forms the group: blocks until every rank joined, the rendezvous deadline passed, or a rank was
  // refused. Collectives before it fail.
  virtual Status rendezvous() = 0;
};

// Checks the options; the communicator has not joined its group yet.
Result<std::unique_ptr<TcpCommunicator>> make_tcp_communicator(const TcpOptions& options);

// make_tcp_communicator + rendezvous.
Result<std::unique_ptr<Communicator>> connect_tcp(const TcpOptions& options);

}  // namespace tandem::comm
