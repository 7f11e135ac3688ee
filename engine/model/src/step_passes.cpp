#include "tandem/model/step_passes.hpp"

namespace tandem::model {

std::vector<StepPass> plan_step_passes(std::span<const PagedWork> work, int invariant_chunk, bool group_prefill) {
  const int S = static_cast<int>(work.size());
  std::vector<int> row_at(static_cast<std::size_t>(S)), token_at(static_cast<std::size_t>(S));
  int rows = 0, tokens = 0;
  for (int s = 0; s < S; ++s) {
    row_at[static_cast<std::size_t>(s)] = rows, token_at[static_cast<std::size_t>(s)] = tokens;
    rows += logit_rows(work[static_cast<std::size_t>(s)]);
    tokens += static_cast<int>(work[static_cast<std::size_t>(s)].tokens.size());
  }
  auto decode_class = [&](int s) { return static_cast<int>(work[static_cast<std::size_t>(s)].tokens.size()) <= invariant_chunk; };
  std::vector<StepPass> passes;
  auto add = [&](StepPass& p, int s) {
    const PagedWork& w = work[static_cast<std::size_t>(s)];
    p.items.push_back(s);
    for (int i = 0; i < logit_rows(w); ++i) p.rows.push_back(row_at[static_cast<std::size_t>(s)] + i);
    for (int i = 0; i < static_cast<int>(w.tokens.size()); ++i) p.tokens.push_back(token_at[static_cast<std::size_t>(s)] + i);
  };
  StepPass decode;
  decode.invariant = true;
  for (int s = 0; s < S; ++s)
    if (decode_class(s)) add(decode, s);
  if (!decode.items.empty()) passes.push_back(std::move(decode));
  StepPass grouped;
  for (int s = 0; s < S; ++s) {
    if (decode_class(s)) continue;
    if (group_prefill) {
      add(grouped, s);
      continue;
    }
    StepPass own;
    add(own, s);
    passes.push_back(std::move(own));
  }
  if (!grouped.items.empty()) passes.push_back(std::move(grouped));
  return passes;
}

std::vector<RowRun> row_runs(std::span<const int> from, std::span<const int> to) {
  std::vector<RowRun> runs;
  for (std::size_t i = 0; i < to.size(); ++i) {
    const int f = from.empty() ? static_cast<int>(i) : from[i];
    if (!runs.empty() && runs.back().from + runs.back().n == f && runs.back().to + runs.back().n == to[i]) {
      ++runs.back().n;
      continue;
    }
    runs.push_back({f, to[i], 1});
  }
  return runs;
}

}  // namespace tandem::model
