#include "rank_group.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tandem/comm/nccl_communicator.hpp"
#ifdef TANDEM_HAVE_CUDA_MODEL
#include "tandem/model/comm_all_reduce.hpp"
#endif
#include "tandem/units.hpp"

namespace tandem::engine::serve {

namespace {

std::uint64_t fnv1a(const std::string& bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : bytes) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string group_fingerprint(const ServeConfig& cfg, const std::filesystem::path& model_dir) {
  std::ifstream in(model_dir / "config.json", std::ios::binary);
  std::stringstream config;
  config << in.rdbuf();
  const std::string shape = "|tp=" + std::to_string(cfg.nnodes) + "|block=" + std::to_string(cfg.block_size) +
                            "|kv=" + cfg.kv_cache_dtype + "|len=" + std::to_string(cfg.max_model_len);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(config.str() + shape)));
  return hex;
}

tandem::Result<std::shared_ptr<model::DeviceAllReduce>> wire_device_all_reduce(comm::TcpCommunicator& group, model::Model& m,
                                                                             const std::function<void(const std::string&)>& log) {
#ifdef TANDEM_HAVE_CUDA_MODEL
  auto* cuda = dynamic_cast<model::CudaModel*>(&m);
  if (!cuda || group.size() == 1) return std::shared_ptr<model::DeviceAllReduce>();
  auto* devices = dynamic_cast<comm::NcclCommunicator*>(&group);
  if (!devices) return model::error("a CUDA model at " + std::to_string(group.size()) + " ranks needs the GPU group (NCCL or host-staged)");
  auto ar = std::make_shared<model::CommAllReduce>(*devices);
  cuda->set_all_reduce(ar.get());
  // The host-staged all-reduce synchronises the stream, so its steps run eagerly. NCCL's
  // collectives are captured into the decode graphs; an eager collective, and a whole replayed
  // step, is waited for by polling the stream and NCCL's async errors (how a lost peer becomes an
  // error instead of a hang).
  if (devices->host_staged()) {
    cuda->set_enforce_eager(true);
    log("CUDA graphs off: the host-staged all-reduce synchronises the stream (a test transport)");
  } else {
    log("CUDA graphs as configured under NCCL: its collectives are captured, each step is watched for a lost peer");
  }
  return std::shared_ptr<model::DeviceAllReduce>(std::move(ar));
#else
  (void)group, (void)m, (void)log;
  return std::shared_ptr<model::DeviceAllReduce>();
#endif
}

tandem::Result<std::unique_ptr<comm::TcpCommunicator>> make_rank_group(const ServeConfig& cfg, const std::filesystem::path& model_dir,
                                                                      const std::function<void(const std::string&)>& log) {
  comm::TcpOptions o;
  o.rank = cfg.node_rank;
  o.size = cfg.nnodes;
  o.master_addr = cfg.master_addr;
  o.master_port = cfg.master_port;
  if (auto d = parse_duration(cfg.rendezvous_timeout)) o.rendezvous_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  if (auto d = parse_duration(cfg.peer_timeout)) o.peer_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  o.fingerprint = group_fingerprint(cfg, model_dir);
  o.log = log;
  // GPU ranks sum their partials with NCCL (device buffers, NVLink/IB/sockets as NCCL finds them);
  // the TCP group stays their control plane. CPU ranks, and a group of one, need only TCP.
  if (cfg.device == "cuda" && cfg.nnodes > 1) {
    comm::NcclOptions n;
    n.control = o;
    n.init_timeout = o.rendezvous_timeout;
    if (auto t = comm::parse_device_transport(cfg.tp_transport)) n.transport = *t;
    else return model::error("`tp_transport` '" + cfg.tp_transport + "': expected auto, nccl or host");
    log("tensor parallel on the GPU (`tp_transport` " + cfg.tp_transport + ": NCCL " + comm::NcclCommunicator::nccl_version() +
        ", or host-staged for ranks sharing a GPU, chosen at the rendezvous; control plane: TCP at " + cfg.master_addr + ":" +
        std::to_string(cfg.master_port) + ")");
    auto nccl = comm::make_nccl_communicator(n);
    if (!nccl) return model::error(nccl.error().message);
    return std::unique_ptr<comm::TcpCommunicator>(std::move(nccl).value());
  }
  auto group = comm::make_tcp_communicator(o);
  if (!group) return model::error(group.error().message);
  return std::move(group).value();
}

}  // namespace tandem::engine::serve
