// Which part of the weights a tensor-parallel rank holds. Every split is contiguous and the parts
// differ in size by at most one, so any count divides across any number of ranks:
//   attention   heads (GQA: whole key/value heads with their query heads)   column-parallel in,
//               o_proj's matching input columns                             row-parallel out
//   MLPs        intermediate width: gate/up rows, down columns
//   MoE         whole routed experts; the router and its bias are replicated
//   vocabulary  embedding rows and LM-head rows (vocab-parallel)
// Row-parallel outputs are partial sums that the communicator all-reduces.
#pragma once
#include "tandem/comm/communicator.hpp"

namespace tandem::model {

struct Range {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
  bool contains(int i) const { return i >= begin && i < end; }
};

// The part of n items that rank `rank` of `ranks` holds.
inline Range split(int n, int rank, int ranks) {
  const long long N = n;
  return {static_cast<int>(N * rank / ranks), static_cast<int>(N * (rank + 1) / ranks)};
}

}  // namespace tandem::model
