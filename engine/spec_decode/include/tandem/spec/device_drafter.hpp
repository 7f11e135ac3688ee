// A speculative drafter that runs on the device of a device-resident target (model::CudaModel),
// batched over every sequence of a step. The engine (runtime/run_device_step.cpp) drives it:
//   1. propose: one drafter forward for all sequences that draft this step;
//   2. the target verifies every block in one step (PagedWork::all_logits), capturing the
//      drafter's target layers for every token of the step;
//   3. add_context: context rows for every token of that step from the capture, before the next
//      step overwrites it (the CUDA drafter copies the captured rows aside and writes them all
//      before its next proposal, so steps that draft nothing cost a copy, not a drafter pass).
// Context rows live in a device pool with the target's block tables (same block size and count),
// so, as on the CPU path (drafter.hpp), prefix-cache hits, preemption and rollback need nothing of
// their own. Step 3 writes rows for rejected drafts too: they lie beyond the written length, so
// the next proposal either overwrites them with its own block rows or masks them out (its queries
// see positions up to the end of its block only), and a later step overwrites them for good.
// The CUDA implementation is engine/spec_decode/cuda (load_dflash_cuda); this header needs no CUDA.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/model/model.hpp"
#include "tandem/model/result.hpp"

namespace tandem::model {
class OpTimer;  // tandem/model/cuda_model.hpp
}

namespace tandem::spec {

// One sequence's proposal: `n` tokens after `anchor`, the last committed token, which sits at
// position `pos` (the sequence's written length: it has no target KV or context row yet). The
// block table must cover positions pos .. pos + n (the scheduler reserved them for verification).
struct DraftItem {
  std::int32_t anchor = 0;
  int pos = 0;
  int n = 0;
  std::span<const std::int32_t> block_table;
};

struct Drafts {
  std::vector<std::int32_t> tokens;  // the argmax of each proposal row, items' rows in order
  std::vector<float> logits;         // the rows' logits (rows x vocab), only when asked for
  // Of the call's time, the seconds spent writing context rows of earlier steps that waited for
  // this proposal (add_context): a cost of every token the target ran, not of drafting.
  double context_seconds = 0;
};

class DeviceDrafter {
 public:
  virtual ~DeviceDrafter() = default;
  virtual const std::vector<int>& target_layers() const = 0;
  virtual int max_draft() const = 0;
  // Device bytes of one token's context rows over all drafter layers (sizing).
  virtual std::uint64_t context_bytes_per_token() const = 0;
  // The context pool, with the target pool's geometry; before anything else.
  virtual tandem::Status make_pool(std::int32_t num_blocks, int block_size) = 0;
  // Context rows for every token of the target's last step (`work`: that step's items, in order);
  // written to the pool by the next propose() at the latest.
  virtual tandem::Status add_context(std::span<const model::PagedWork> work) = 0;
  // Proposals for several sequences in one forward; `logits`: also return every row's logits.
  virtual tandem::Result<Drafts> propose(std::span<const DraftItem> items, bool logits) = 0;
  // Per-op device timing (tandem_spec_bench --probe): an eager drafter marks the ops it enqueues,
  // as the target does (model::OpTimer); one that replays graphs, or none given, marks nothing.
  virtual void set_op_timer(model::OpTimer*) {}
};

}  // namespace tandem::spec
