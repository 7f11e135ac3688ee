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
#include "tandem/model/result.hpp"

namespace tandem::engine::serve {

// Not joined yet. For one rank, a group of one (rendezvous() returns at once).
tandem::Result<std::unique_ptr<comm::TcpCommunicator>> make_rank_group(const ServeConfig& cfg, const std::filesystem::path& model_dir,
                                                                      const std::function<void(const std::string&)>& log);

// What the ranks must agree on before they run collectives: the model's config.json, the group
// shape, the KV geometry flags. (Whole-file weight hashes are the controller's hashes.compare step.)
std::string group_fingerprint(const ServeConfig& cfg, const std::filesystem::path& model_dir);

}  // namespace tandem::engine::serve
