// Adaptive draft length of one request, from its own running acceptance.
//
// For each draft position i the controller keeps a running estimate r_i of "position i is accepted,
// given positions before it were" (an exponential average over the verifications that reached i).
// The expected number of accepted drafts with k proposals is sum_{j<=k} prod_{i<=j} r_i, so
// position j is only worth drafting while prod_{i<=j} r_i, the chance it is accepted at all, stays
// at or above `min_chance`. When even the first position falls below it, the request decodes
// plainly (no drafter, no wider verify), and every `probe_every` plain steps it drafts the full
// length once to measure again: text where drafting does not pay costs at most one probe per
// `probe_every` tokens.
#pragma once
#include <cstddef>
#include <vector>

namespace tandem::spec {

struct DraftLengthPolicy {
  double min_chance = 0.2;   // draft position j while its estimated chance of acceptance >= this
  double smoothing = 0.25;   // weight of the newest verification in each r_i
  int probe_every = 16;      // plain steps between probes once drafting stopped paying
};

class DraftLength {
 public:
  DraftLength(int max_draft, DraftLengthPolicy p = {});
  // How many tokens to draft in the next step (0: decode plainly).
  int next();
  // A verification of `drafted` proposals kept the first `accepted`.
  void record(int drafted, int accepted);
  double estimate(int position) const { return rate_[static_cast<std::size_t>(position)]; }

 private:
  int max_;
  DraftLengthPolicy p_;
  std::vector<double> rate_;  // r_i for positions 0 .. max-1 (position 0 is the first draft)
  int plain_steps_ = 0;
};

}  // namespace tandem::spec
