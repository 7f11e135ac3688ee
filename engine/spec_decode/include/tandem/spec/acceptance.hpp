// Verification of a drafted block against the target's logits.
//
// The target scored the block [anchor, d1..dn] in one forward: row i of its logits is the target's
// distribution for the token after block token i. Greedy acceptance keeps the drafts that equal the
// target's argmax and then takes the target's own token, so the output is exactly plain greedy
// decoding. Sampled acceptance is the standard speculative-sampling rule (Leviathan et al. 2023;
// Chen et al. 2023): d_i, drawn from the drafter's q_i, is kept with probability min(1, p_i/q_i);
// the first rejection draws from the residual max(p_i - q_i, 0) renormalised; when every draft is
// kept, one more token is drawn from p_n. Each emitted token is then distributed exactly as plain
// sampling from p would have been. p and q are the distributions kernels::sample_cpu draws from
// (temperature, top-k, top-p, min-p applied).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tandem/kernels/sampling.hpp"

namespace tandem::spec {

struct Verdict {
  int accepted = 0;         // drafts kept: d1..d_accepted
  std::int32_t next = 0;    // the target's token after them (correction or bonus)
};

// target_logits: (drafts.size() + 1) rows of `vocab`.
Verdict accept_greedy(std::span<const std::int32_t> drafts, std::span<const float> target_logits, int vocab);
// The same verdict from the target's greedy token of each row (drafts.size() + 1 of them), as a
// device that picks where the logits are reads them back (model::Model::step_sample).
Verdict accept_greedy_tokens(std::span<const std::int32_t> drafts, std::span<const std::int32_t> target_tokens);

// The distribution sample_cpu draws from for these logits and parameters (temperature > 0), dense
// over the vocabulary, summing to 1.
std::vector<double> sampling_distribution(std::span<const float> logits, const kernels::SamplingParams& p);

// Draws one token from a dense distribution with one uniform of `rng`.
std::int32_t draw(std::span<const double> probs, std::mt19937_64& rng);

// draft_probs: drafts.size() rows of `vocab` (each d_i was drawn from its row);
// target_logits: drafts.size() + 1 rows. Draws from `rng`.
Verdict accept_sampled(std::span<const std::int32_t> drafts, std::span<const double> draft_probs,
                       std::span<const float> target_logits, int vocab, const kernels::SamplingParams& p,
                       std::mt19937_64& rng);

}  // namespace tandem::spec
