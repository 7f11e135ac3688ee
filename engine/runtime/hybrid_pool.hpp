// Models with recurrent layers (glm5_next: linear attention beside sparse attention) need two
// kinds of memory: attention rows that grow with every token, and a fixed-size state per running
// sequence. tandem keeps them in separate pools: the paged pool holds the attention layers' rows
// only, in pages of --block-size tokens, and each running sequence owns one state slot
// (max_num_seqs of them, budgeted up front).
//
// The alternative it is compared with (the seed's operators had to use it: --block-size 2304) is a
// single page layout for every layer: one page size P for attention and recurrent layers alike,
// the block size raised to the smallest multiple of --block-size whose attention page can hold a
// recurrent layer's state, and every layer holding one page per block. For the same bytes that
// layout holds far fewer tokens; hybrid_pool_report says how many, for the start-up log.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/model/kv_cache.hpp"

namespace tandem::engine::runtime {

struct HybridPoolInputs {
  model::KvLayout layout;        // n_layers: attention layers; state_floats: all recurrent layers' state
  int recurrent_layers = 0;      // how many layers the state is split over
  int bytes_per_elem = 2;        // attention rows (--kv-cache-dtype)
  int state_bytes_per_elem = 4;  // the recurrent state is kept in fp32
  int block_size = 16;
  int max_num_seqs = 1;
  std::uint64_t budget_bytes = 0;
};

struct HybridPoolReport {
  std::uint64_t state_pool_bytes = 0;  // max_num_seqs slots
  std::int64_t tokens = 0;             // ours: attention tokens the rest of the budget holds
  int lcm_block_size = 0;              // the single-layout block size
  std::int64_t lcm_tokens = 0;         // what the single layout holds for the same budget
  std::vector<std::string> lines;      // the start-up log / table
};

HybridPoolReport hybrid_pool_report(const HybridPoolInputs& in);

}  // namespace tandem::engine::runtime
