// tandem-serve's place in a tensor-parallel group, from its flags: one rank per process, rank
// --node-rank of --nnodes, rank 0 at --master-addr:--master-port. The group is made before the
// model loads (a rank loads only its slice) and joined after (rendezvous), so that a slow load
// never eats into the rendezvous window. GPU ranks (--device cuda) get the NCCL communicator, whose
// control plane is the same TCP group.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "serve_config.hpp"
#include "tandem/comm/tcp_communicator.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/result.hpp"

namespace tandem::model {
class DeviceAllReduce;
}

namespace tandem::engine::serve {

// Not joined yet. For one rank, a group of one (rendezvous() returns at once).
tandem::Result<std::unique_ptr<comm::TcpCommunicator>> make_rank_group(const ServeConfig& cfg, const std::filesystem::path& model_dir,
                                                                      const std::function<void(const std::string&)>& log);

// What the ranks must agree on before they run collectives: the model's config.json, the group
// shape, the KV geometry flags. (Whole-file weight hashes are the controller's hashes.compare step.)
// After the rendezvous of GPU ranks (--device cuda, --nnodes > 1): the CUDA model's DeviceAllReduce
// over the group, set on the model, whichever transport the rendezvous chose (logged there); the
// ranks' steps run eagerly (why: rank_group.cpp). Keep it alive as long
// as the model. Null for CPU ranks and a group of one.
tandem::Result<std::shared_ptr<model::DeviceAllReduce>> wire_device_all_reduce(comm::TcpCommunicator& group, model::Model& m,
                                                                             const std::function<void(const std::string&)>& log);

std::string group_fingerprint(const ServeConfig& cfg, const std::filesystem::path& model_dir);

}  // namespace tandem::engine::serve
