#include "pool_plan.hpp"

#include <fstream>
#include <limits>
#include <sstream>

namespace tandem::engine::runtime {

using model::error;

tandem::Result<int> kv_bytes_per_elem(const std::string& kv_cache_dtype, const std::string& model_dtype) {
  const std::string& d = kv_cache_dtype == "auto" ? model_dtype : kv_cache_dtype;
  if (d.empty() || d == "bfloat16" || d == "bf16" || d == "float16" || d == "fp16" || d == "half") return 2;
  if (d == "float32" || d == "fp32" || d == "float") return 4;
  if (d == "fp8" || d == "fp8_e4m3" || d == "fp8_e5m2") return 1;
  return error("`kv_cache_dtype` " + kv_cache_dtype + (kv_cache_dtype == "auto" ? " (model dtype " + d + ")" : "") +
               " is not one of auto, bfloat16, float16, float32, fp8, fp8_e4m3, fp8_e5m2");
}

tandem::Result<std::uint64_t> cpu_kv_budget(double gpu_memory_utilization) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    return error("`gpu_memory_utilization` must be in (0, 1], got " + std::to_string(gpu_memory_utilization));
  std::ifstream in("/proc/meminfo");
  std::uint64_t total_kib = 0, available_kib = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    fields >> key >> kib;
    if (key == "MemTotal:") total_kib = kib;
    if (key == "MemAvailable:") available_kib = kib;
  }
  if (total_kib == 0 || available_kib == 0)
    return error("cannot read MemTotal/MemAvailable from /proc/meminfo to size the KV pool; pass `kv_cache_memory`");
  const double allowed = gpu_memory_utilization * static_cast<double>(total_kib) * 1024.0;
  const double in_use = static_cast<double>(total_kib - available_kib) * 1024.0;
  if (allowed <= in_use)
    return error("`gpu_memory_utilization` " + std::to_string(gpu_memory_utilization) + " allows " +
                 std::to_string(static_cast<std::uint64_t>(allowed) >> 20) + " MiB but " +
                 std::to_string(static_cast<std::uint64_t>(in_use) >> 20) +
                 " MiB are already in use; nothing is left for the KV pool (raise it or pass `kv_cache_memory`)");
  return static_cast<std::uint64_t>(allowed - in_use);
}

tandem::Result<kv::PoolSize> plan_pool(const model::KvLayout& layout, const PoolFlags& flags) {
  if (flags.block_size <= 0) return error("`block_size` must be positive, got " + std::to_string(flags.block_size));
  if (flags.max_model_len <= 0) return error("`max_model_len` must be positive");
  auto bytes = kv_bytes_per_elem(flags.kv_cache_dtype, flags.model_dtype);
  if (!bytes) return bytes.error();
  std::uint64_t budget = 0;
  if (flags.kv_cache_memory) {
    budget = *flags.kv_cache_memory;
  } else {
    auto b = cpu_kv_budget(flags.gpu_memory_utilization);
    if (!b) return b.error();
    budget = b.value();
  }
  kv::KvGeometry g;
  g.num_layers = layout.n_layers;
  g.elems_per_token = layout.row_width;
  g.bytes_per_elem = bytes.value();
  g.block_size = flags.block_size;
  kv::PoolSize p = kv::size_pool(g, budget, flags.max_model_len);
  // Block ids are int32 in the block tables.
  if (p.num_blocks > std::numeric_limits<std::int32_t>::max()) {
    p.num_blocks = std::numeric_limits<std::int32_t>::max();
    p.tokens = p.num_blocks * flags.block_size;
    p.requests_at_max_len = static_cast<double>(p.tokens) / flags.max_model_len;
  }
  if (p.tokens < flags.max_model_len) {
    const std::uint64_t per_token = static_cast<std::uint64_t>(layout.n_layers) * static_cast<std::uint64_t>(layout.row_width) *
                                    static_cast<std::uint64_t>(bytes.value());
    const std::uint64_t need = per_token * static_cast<std::uint64_t>(flags.max_model_len);
    return error("the KV pool holds " + std::to_string(p.tokens) + " tokens (" + std::to_string(p.num_blocks) +
                 " blocks of " + std::to_string(flags.block_size) + " from " + std::to_string(budget) +
                 " bytes), not one sequence of `max_model_len` " + std::to_string(flags.max_model_len) + " (needs " +
                 std::to_string(need) + " bytes at " + std::to_string(bytes.value()) +
                 " bytes per element); raise `kv_cache_memory` or lower `max_model_len`");
  }
  return p;
}

}  // namespace tandem::engine::runtime
