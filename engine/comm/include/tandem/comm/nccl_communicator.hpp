// Tensor-parallel GPU ranks over NCCL, one process per GPU, as across two nodes.
//
// The control plane is the TCP group (tcp_communicator.hpp): rank 0 listens at
// --master-addr:--master-port, the others dial it, and the fingerprint check refuses a rank that
// loaded something else. Over it rank 0 hands out the NCCL unique id; then every rank initialises
// its NCCL communicator non-blocking and polls it against a deadline, so a peer that never arrives
// ends the init with a message instead of a hang. Collectives on device buffers are enqueued on
// the caller's stream and waited for with the same polling: a peer that dies mid-step makes NCCL
// report an async error (or the step overruns peer_timeout), the communicator is aborted
// (ncclCommAbort frees the kernels spinning on the dead link) and every later call fails at once.
//
// Two transports for the device collectives, chosen at the rendezvous and the same on every rank:
// NCCL between distinct GPUs, or host-staged for ranks that share one GPU (NCCL refuses two ranks on
// one device): device -> pinned host copy, the TCP group's all-reduce, host -> device. The ranks
// exchange their GPU UUIDs over the TCP group; `automatic` takes host-staged when two are the same,
// and any rank asking for host_staged makes the whole group host-staged. Host-staged is a test
// transport (one GPU standing in for two): every collective synchronises the stream, so it cannot
// be captured into a CUDA graph, and its cost is the TCP round trip's.
//
// The host-side Communicator calls keep working (the engine's control messages and the CPU-path
// collectives): all_reduce_sum copies through the device, all_gather and broadcast use the TCP
// group, which also carries the heartbeats that tell a worker its head is gone.
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "tandem/comm/communicator.hpp"
#include "tandem/comm/tcp_communicator.hpp"

namespace tandem::comm {

enum class DeviceDType { f32, bf16 };

enum class DeviceTransport { automatic, nccl, host_staged };
// "auto", "nccl", "host" (the --tp-transport flag); nullopt for anything else.
inline std::optional<DeviceTransport> parse_device_transport(const std::string& name) {
  if (name == "auto") return DeviceTransport::automatic;
  if (name == "nccl") return DeviceTransport::nccl;
  if (name == "host") return DeviceTransport::host_staged;
  return std::nullopt;
}

struct NcclOptions {
  TcpOptions control;                               // rank, size, master address/port, timeouts, fingerprint
  int device = 0;                                   // the CUDA device this rank drives
  std::chrono::milliseconds init_timeout{60000};    // ncclCommInitRankConfig must finish within this
  DeviceTransport transport = DeviceTransport::automatic;
};

// Made before the model loads (a rank loads its slice knowing rank and size), joined after:
// rendezvous() is the TCP rendezvous, the unique id hand-out and the NCCL init, so a slow load
// never eats into the rendezvous window (the same contract as the TCP group's).
class NcclCommunicator : public TcpCommunicator {
 public:
  // Sum over the ranks of `count` elements at device pointer `data`, in place, on `stream` (a
  // cudaStream_t; nullptr: the default stream). Returns when the sum is done, or with the error
  // that broke the group (peer lost, timeout), after which every call fails the same way.
  // On a stream capturing a CUDA graph (NCCL only: the host-staged sum is refused there) it is
  // captured and returns at once; wait_device() then waits for each replay.
  virtual Status all_reduce_sum_device(void* data, std::size_t count, DeviceDType dtype, void* stream) = 0;
  // Waits for everything enqueued on `stream` (a replayed graph's collectives among it) as the
  // collectives wait: a lost or stalled peer is an error after the peer timeout, never a hang.
  virtual Status wait_device(void* stream) = 0;
  // Every rank's `count` elements at `send`, concatenated in rank order into `recv` (size x count).
  virtual Status all_gather_device(const void* send, void* recv, std::size_t count, DeviceDType dtype,
                                   void* stream) = 0;
  virtual int device() const = 0;
  // After rendezvous: whether the device collectives are host-staged (else NCCL), and why, in words.
  virtual bool host_staged() const = 0;
  virtual std::string transport() const = 0;
  // NCCL's version string, e.g. "2.28.3", for logs and --print-config.
  static std::string nccl_version();
};

// Checks the options and the device; the group is not joined yet.
Result<std::unique_ptr<NcclCommunicator>> make_nccl_communicator(const NcclOptions& options);
// make_nccl_communicator + rendezvous (TCP rendezvous, unique id from rank 0, non-blocking NCCL init
// within options.init_timeout). Fails with a message that says which stage did not finish.
Result<std::unique_ptr<NcclCommunicator>> connect_nccl(const NcclOptions& options);

// Whether this build has the NCCL communicator at all (CUDA back end built), and a device to run on.
bool nccl_built();
int cuda_device_count();

}  // namespace tandem::comm
