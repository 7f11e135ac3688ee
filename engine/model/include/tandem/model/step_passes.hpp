// How a CUDA step splits its sequences into forward passes by phase (cuda_decoder.hpp's run()),
// and where each pass's rows land in the step's own order. Host code, tested on the CPU.
//
// A sequence whose chunk in the step has at most `invariant_chunk` new tokens (a decode, a
// speculative verification block of 1 + k, a prompt's short tail) is decode-class: it runs in one
// pass with the other decode-class sequences on the batch-invariant decode-sized kernels, so its
// rows do not depend on anything else in the step. A longer chunk (a prompt's prefill) is
// prefill-class and runs on the fast kernels (cuBLASLt, grouped experts, prefill attention), whose
// rows depend on the shape of the pass they share: by default each prefill-class sequence has a pass
// of its own, so a prompt's rows depend only on how that prompt is chunked; grouped, one pass holds
// them all (fewer weight reads for many short prompts; a prompt's rows then depend on which prompts
// share its step). Sequences are independent within a step (attention stays inside a sequence),
// so the passes compute what one pass would, up to those kernels' rounding.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "tandem/model/model.hpp"

namespace tandem::model {

struct StepPass {
  bool invariant = false;   // decode-class: the batch-invariant kernels
  std::vector<int> items;   // indices into the step's work, in the step's order
  std::vector<int> rows;    // the step's logit row of each of the pass's logit rows, in its order
  std::vector<int> tokens;  // the step's token index of each of the pass's tokens, in its order
};

// Logit rows an item asks for: every token's (all_logits), the last token's (logits), or none.
inline int logit_rows(const PagedWork& w) {
  return w.all_logits ? static_cast<int>(w.tokens.size()) : w.logits ? 1 : 0;
}

// The passes of a step, the decode-class one first (when there is one). invariant_chunk <= 0: every
// sequence is prefill-class (the decode-sized kernels off); group_prefill: one prefill-class pass.
// A step of one class only and one pass is a single pass over every item, as before.
std::vector<StepPass> plan_step_passes(std::span<const PagedWork> work, int invariant_chunk, bool group_prefill);

// A run of n consecutive rows copied from row `from` of a pass's buffer to row `to` of the step's.
struct RowRun {
  int from = 0, to = 0, n = 0;
};

// from[i] -> to[i] for every i (from empty: i -> to[i]), consecutive pairs merged into runs: one
// copy per run (an item's block of rows is one run).
std::vector<RowRun> row_runs(std::span<const int> from, std::span<const int> to);

}  // namespace tandem::model
