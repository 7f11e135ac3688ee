// The loop of a headless worker rank: size the KV pool with the head (the group's smallest), then run every forward the head
// announces, taking part in its collectives, until the head shuts down or goes silent.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "tandem/model/model.hpp"

namespace tandem::engine::runtime {

struct WorkerOptions {
  // The head sends a heartbeat every second while idle; this much silence means it is gone.
  std::chrono::milliseconds head_silence{10000};
  std::function<void(const std::string&)> log;
  // The KV blocks this rank's own flags allow for a block size (its memory, its device); the group
  // takes the smallest of the ranks' counts (kv_agreement.hpp). Unset: rank 0's count.
  std::function<tandem::Result<std::int64_t>(int block_size)> own_kv_blocks;
};

// Ok when the head shut down cleanly; an error that says what happened otherwise.
// A device model (kv_on_device: CUDA) mirrors the head's pool on its device and runs the head's
// batched steps; a host model its forwards, one sequence at a time.
tandem::Status run_worker_rank(model::Model& model, const WorkerOptions& options);

}  // namespace tandem::engine::runtime
