// The KV pool's size across a tensor-parallel group. Each rank sizes what its own flags allow
// (`kv_cache_memory`, `gpu_memory_utilization`, on its own device), but the head's block tables
// address every rank's pool, so the group runs with the smallest; every rank logs the capacities.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "tandem/comm/communicator.hpp"
#include "tandem/model/result.hpp"

namespace tandem::engine::runtime {

// `mine`: the blocks this rank's flags allow. Every rank calls it at the same point (a collective);
// the answer is the same on every rank.
tandem::Result<std::int64_t> agree_kv_blocks(comm::Communicator& comm, std::int64_t mine, const std::function<void(const std::string&)>& log);

}  // namespace tandem::engine::runtime
