// What the head rank tells its workers, through the communicator's broadcast. Workers own no
// scheduler: they mirror the head's pool geometry and run exactly the forwards the head runs, with
// the head's block tables, so their KV pages hold their heads' rows of the same tokens.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/model/result.hpp"

namespace tandem::engine::runtime {

enum class RankOp : std::uint8_t {
  pool = 1,       // allocate the KV pool: num_blocks x block_size (and the kept recurrent states)
  forward = 2,    // run one forward against the pool
  heartbeat = 3,  // nothing to do; the head is alive
  shutdown = 4,   // the head is stopping; exit cleanly
  device_step = 5,  // a device model's batched step (CUDA): every item of the head's step at once
};

// A CPU forward's recurrent state: as it is, kept aside first (a verification that may be rolled
// back), or put back from the kept copy first (the rollback's forward over the accepted tokens).
enum class StateOp : std::uint8_t { none = 0, keep = 1, restore = 2 };

// One item of a device step (model::PagedWork without the spans).
struct StepItem {
  std::int32_t start = 0, state_slot = -1, state_load = -1, state_save = -1;
  std::uint8_t logits = 0, all_logits = 0;
  std::vector<std::int32_t> tokens, table;
};

struct RankMessage {
  RankOp op = RankOp::heartbeat;
  // pool; state_snapshots: a device model's kept recurrent states (Model::make_state_snapshots)
  std::int32_t num_blocks = 0, block_size = 0, state_snapshots = 0;
  // forward: tokens at positions start, start+1, ...; block table of the sequence; how many of the
  // last tokens' logits are wanted (the gather is collective, so workers must know: 1 to sample,
  // the whole block to verify speculative drafts)
  std::int32_t start = 0;
  std::vector<std::int32_t> tokens, table;
  std::int32_t logit_rows = 0;
  // A model with a recurrent state (glm5_next): the worker's slot of the sequence's state (-1:
  // none), what to do with it before the forward (StateOp), and the prefix copies to load it
  // from before / keep it in after (-1: none), as the head does with its own.
  std::int32_t state_slot = -1, state_load = -1, state_save = -1;
  std::uint8_t state_op = 0;
  // device_step: its items, and the state slots to keep aside / put back before it (StateSlots)
  std::vector<StepItem> items;
  std::vector<std::int32_t> keep_states, restore_states;
  // shutdown
  std::string reason;
};

std::vector<std::uint8_t> encode(const RankMessage& m);
// Checks every length against the bytes it has; a short or unknown message is an error.
tandem::Result<RankMessage> decode(std::span<const std::uint8_t> bytes);

}  // namespace tandem::engine::runtime
