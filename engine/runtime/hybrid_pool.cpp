#include "hybrid_pool.hpp"

#include <algorithm>
#include <cstdio>

namespace tandem::engine::runtime {

HybridPoolReport hybrid_pool_report(const HybridPoolInputs& in) {
  HybridPoolReport r;
  const auto& l = in.layout;
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(l.row_width) * static_cast<std::uint64_t>(in.bytes_per_elem);
  const std::uint64_t state_bytes = static_cast<std::uint64_t>(l.state_floats) * static_cast<std::uint64_t>(in.state_bytes_per_elem);
  const std::uint64_t B = static_cast<std::uint64_t>(std::max(in.block_size, 1));
  r.state_pool_bytes = state_bytes * static_cast<std::uint64_t>(std::max(in.max_num_seqs, 1));

  // Ours: the state slots first, then whole blocks of attention rows.
  const std::uint64_t block_bytes = B * row_bytes * static_cast<std::uint64_t>(l.n_layers);
  const std::uint64_t left = in.budget_bytes > r.state_pool_bytes ? in.budget_bytes - r.state_pool_bytes : 0;
  r.tokens = block_bytes ? static_cast<std::int64_t>(left / block_bytes * B) : 0;

  // The single layout: a page must hold one recurrent layer's state, so the block grows to the
  // smallest multiple of B with block * row_bytes >= per-layer state; every layer (attention and
  // recurrent) holds one page of that size per block.
  const int recurrent = std::max(in.recurrent_layers, l.state_floats > 0 ? 1 : 0);
  const std::uint64_t per_layer_state = recurrent ? state_bytes / static_cast<std::uint64_t>(recurrent) : 0;
  std::uint64_t lcm_block = B;
  if (row_bytes) lcm_block = std::max<std::uint64_t>(B, (per_layer_state + row_bytes * B - 1) / (row_bytes * B) * B);
  r.lcm_block_size = static_cast<int>(lcm_block);
  const std::uint64_t page = lcm_block * row_bytes;
  const std::uint64_t all_layers = static_cast<std::uint64_t>(l.n_layers + recurrent);
  r.lcm_tokens = page ? static_cast<std::int64_t>(in.budget_bytes / (page * all_layers) * lcm_block) : 0;

  auto mib = [](std::uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2fx", r.lcm_tokens ? static_cast<double>(r.tokens) / static_cast<double>(r.lcm_tokens) : 0.0);
  r.lines.push_back("recurrent state pool: " + std::to_string(std::max(in.max_num_seqs, 1)) + " slots (`max_num_seqs`) of " +
                    std::to_string(state_bytes >> 10) + " KiB (" + std::to_string(recurrent) + " linear-attention layers, fp32) = " +
                    mib(r.state_pool_bytes) + ", outside the paged pool");
  r.lines.push_back("paged attention pool: " + std::to_string(l.n_layers) + " attention layers x " + std::to_string(row_bytes) +
                    " bytes per token, pages of " + std::to_string(B) + " tokens: " + std::to_string(r.tokens) + " tokens");
  r.lines.push_back("for the same " + mib(in.budget_bytes) + ", one page layout for all " + std::to_string(all_layers) +
                    " layers (block size " + std::to_string(lcm_block) + " so a page holds a layer's state) would hold " +
                    std::to_string(r.lcm_tokens) + " tokens; separate pools hold " + ratio + " as many");
  return r;
}

}  // namespace tandem::engine::runtime
