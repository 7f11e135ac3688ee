// How large the paged KV pool is: from --kv-cache-memory when given, else from the share of
// memory --gpu-memory-utilization allows (on the CPU device: system memory), at the element size
// --kv-cache-dtype names. The result must hold at least one max-model-len sequence.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kv_manager.hpp"
#include "tandem/model/kv_cache.hpp"
#include "tandem/model/result.hpp"

namespace tandem::engine::runtime {

struct PoolFlags {
  std::string kv_cache_dtype = "auto";           // auto | bfloat16 | float16 | float32 | fp8_e4m3 | fp8 ...
  std::string model_dtype;                       // config.json's dtype, what "auto" means
  std::optional<std::uint64_t> kv_cache_memory;  // bytes; wins over the utilization share
  double gpu_memory_utilization = 0.9;
  int block_size = 16;
  int max_model_len = 0;
};

// Bytes per cached element for a --kv-cache-dtype value; an error names unknown ones.
tandem::Result<int> kv_bytes_per_elem(const std::string& kv_cache_dtype, const std::string& model_dtype);

// Memory the CPU device may give the KV pool: utilization * MemTotal minus what is already in use
// (MemTotal - MemAvailable, which includes our loaded weights), from /proc/meminfo.
tandem::Result<std::uint64_t> cpu_kv_budget(double gpu_memory_utilization);

// The pool for `layout` under `flags`: blocks, tokens, and the start-up line's numbers.
tandem::Result<kv::PoolSize> plan_pool(const model::KvLayout& layout, const PoolFlags& flags);

}  // namespace tandem::engine::runtime
