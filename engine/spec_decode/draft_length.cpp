#include "tandem/spec/draft_length.hpp"

#include <algorithm>
#include <cmath>

namespace tandem::spec {

// Optimistic start: a new request drafts the full length until it learns otherwise.
DraftLength::DraftLength(int max_draft, DraftLengthPolicy p)
    : max_(std::max(max_draft, 0)), p_(p), rate_(static_cast<size_t>(max_), 1.0), tried_(static_cast<size_t>(max_), false) {}

// A position never reached by a verification has taught nothing: it is taken to be as likely as
// the position before it (the first one starts at 1). Starting every position at 1 made a request
// whose early positions were known to be weak still expect the later ones to be free, and draft
// the full length until each of them was reached and refuted, one after another.
double DraftLength::estimate(int position) const {
  for (int i = position; i >= 0; --i)
    if (tried_[static_cast<size_t>(i)]) return rate_[static_cast<size_t>(i)];
  return 1.0;
}

int DraftLength::next(const StepCost* cost) {
  int k = 0;
  const auto plain = cost && p_.use_cost ? cost->step(1) : std::nullopt;
  // Costs are kept but no decode is timed yet: decode plainly to time one, rather than draft the
  // full length blind (where verifying costs what decoding does, that is several steps' time).
  // Where plain decodes go untimed for long (on the device path a step is timed only when it
  // holds nothing but decodes), the chance rule takes over rather than never drafting.
  if (cost && p_.use_cost && !plain && ++untimed_steps_ <= p_.probe_every) return 0;
  const StepCost* timed = plain && *plain > 0 ? cost : nullptr;  // costs to weigh, if any
  if (timed) {
    // Tokens per second of each choice; plain decoding is the baseline to beat.
    double best = 1.0 / *plain, expected = 1.0, chance = 1.0;
    for (int j = 1; j <= max_; ++j) {
      chance *= estimate(j - 1);
      expected += chance;
      const auto c = cost->step(j + 1);
      if (c && *c > 0 && expected / *c > best) {
        best = expected / *c;
        k = j;
      }
    }
  } else {
    double chance = 1.0;
    while (k < max_ && (chance *= estimate(k)) >= p_.min_chance) ++k;
  }
  if (k > 0) {
    plain_steps_ = 0;
    return k;
  }
  if (++plain_steps_ >= probe_interval(timed, plain.value_or(0.0))) {
    plain_steps_ = 0;
    return probe_length(timed, plain.value_or(0.0));
  }
  return 0;
}

// A probe re-measures acceptance where drafting stopped paying, so it should cost little: the
// longest draft whose step costs at most `probe_cost` plain steps (on a GPU, where verifying is
// nearly free, that is the full length; where every verified token costs a decode, one draft).
int DraftLength::probe_length(const StepCost* cost, double plain) const {
  if (!cost) return max_;
  int k = 1;
  for (int j = 2; j <= max_; ++j)
    if (const auto c = cost->step(j + 1); c && *c <= p_.probe_cost * plain) k = j;
  return std::min(k, max_);
}

// Probes are spaced so that, while nothing is accepted, they cost at most what the policy allows:
// (probe_cost - 1) plain steps per probe_every. Where even the shortest probe costs more than
// probe_cost plain steps (the CPU path under TP: the drafter runs whole on one rank while the
// target's step is split), probes come that much less often, up to 8 x probe_every apart.
int DraftLength::probe_interval(const StepCost* cost, double plain) const {
  if (!cost || plain <= 0 || p_.probe_cost <= 1.0) return p_.probe_every;
  const auto c = cost->step(probe_length(cost, plain) + 1);
  if (!c) return p_.probe_every;
  const double extra = *c / plain - 1.0, allowed = p_.probe_cost - 1.0;
  if (extra <= allowed) return p_.probe_every;
  return std::min(8 * p_.probe_every, static_cast<int>(std::ceil(p_.probe_every * extra / allowed)));
}

void DraftLength::record(int drafted, int accepted) {
  // Positions 0..accepted-1 were accepted; position `accepted` (if drafted) was tried and refused;
  // later ones were never tried and teach nothing.
  const double a = p_.smoothing;
  for (int i = 0; i < std::min(drafted, max_); ++i) {
    if (i > accepted) break;
    const double hit = i < accepted ? 1.0 : 0.0;
    auto& r = rate_[static_cast<size_t>(i)];
    r = (1 - a) * estimate(i) + a * hit;  // a first visit starts from what the position was taken to be
    tried_[static_cast<size_t>(i)] = true;
  }
}

}  // namespace tandem::spec
