// The costs behind a DFlash speedup on the GPU, measured on the model and drafter directly (no
// engine, no scheduler), for tandem_spec_bench --probe:
//   t_plain   one decode step of `batch` sequences (CUDA graph, logits to the host, as the engine runs it)
//   t_draft   one batched proposal of k tokens per sequence (argmax on the device; CUDA graph)
//   t_verify  one target step over k + 1 tokens per sequence with every row's logits (CUDA graph),
//             plus the drafter's context rows for them
// (t_plain and t_verify are printed without graphs too).
// A DFlash step yields L tokens per sequence (L = acceptance length) for t_draft + t_verify, plain
// decoding one per t_plain, so the speedup is at most L * t_plain / (t_draft + t_verify); L must pass
// (t_draft + t_verify) / t_plain just to break even. Printed as Markdown rows, for each of `lengths`.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tandem::spec::bench {

void print_costs(const std::string& target_dir, const std::string& drafter_dir, int batch, int k,
                 const std::vector<std::pair<std::string, double>>& lengths);

}  // namespace tandem::spec::bench
