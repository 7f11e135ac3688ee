// Shared by the token-mask tests: feeding text as tokens, a one-token-at-a-time reference for the
// mask, and a generation loop with random logits (what a random-weights model looks like).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "json_constraint.hpp"
#include "schema_check.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace tandem::structured_test {

using namespace tandem::engine::structured;

// Advances the constraint by the tokenization of `text`; false when some token was not allowed.
inline bool feed_text(JsonConstraint& c, const std::string& text, const tandem::tokenizer::Tokenizer& tok) {
  for (std::int32_t id : tok.encode(text, false)) {
    auto allowed = c.allowed_tokens();
    if (!std::binary_search(allowed.begin(), allowed.end(), id)) return false;
    c.advance(id);
  }
  return true;
}

// Which tokens may follow `prefix` with `left` tokens after the next one, checked one by one.
inline std::vector<std::int32_t> brute_force_allowed(const std::shared_ptr<const Grammar>& g, const TokenVocabulary& v,
                                                     const std::string& prefix, int left,
                                                     const std::vector<std::int32_t>& stop_ids) {
  JsonMachine base(g);
  if (!base.feed(prefix)) return {};
  std::vector<std::int32_t> out;
  for (std::size_t id = 0; id < v.size(); ++id) {
    const auto b = v.bytes(static_cast<std::int32_t>(id));
    bool ok = false;
    if (b.empty()) {
      ok = base.accepting() && std::find(stop_ids.begin(), stop_ids.end(), static_cast<std::int32_t>(id)) != stop_ids.end();
    } else {
      JsonMachine m(base);
      ok = m.feed(b) && m.min_close() <= left;
    }
    if (ok) out.push_back(static_cast<std::int32_t>(id));
  }
  return out;
}

struct Generated {
  std::string text;
  int tokens = 0;
  double mask_ms = 0;  // time spent in mask(), all steps
};

// Draws from random logits (Gumbel-max over the kept tokens) until the constraint finishes or
// the budget is spent, as the engine would.
inline Generated generate_random(JsonConstraint& c, const tandem::tokenizer::Tokenizer& tok, int budget, std::mt19937_64& rng,
                                 std::size_t logits_size = 0) {
  Generated out;
  std::vector<float> logits(logits_size ? logits_size : tok.vocab_size());
  std::normal_distribution<float> noise(0.0f, 3.0f);
  while (out.tokens < budget && !c.finished()) {
    for (auto& l : logits) l = noise(rng);
    const auto t0 = std::chrono::steady_clock::now();
    c.mask(logits);
    out.mask_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto best = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (!std::isfinite(logits[static_cast<std::size_t>(best)])) break;  // nothing allowed: a bug the caller sees
    c.advance(best);
    if (!tok.is_special(best)) out.text += std::string(tok.token_bytes(best));
    ++out.tokens;
  }
  return out;
}

}  // namespace tandem::structured_test
