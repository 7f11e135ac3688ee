// The engine's TokenConstraint for JSON output: a JsonMachine over the grammar, the vocabulary's
// byte trie, and a token budget.
//
// mask() walks the trie with the machine (rolling back through its journal, so a subtree whose
// prefix cannot continue the document is skipped whole) and keeps a token only when, after its
// bytes, the shortest completion still fits in the tokens left: min_close() <= left. Every byte
// has a token of its own, so from any kept state one token can always lower min_close by one;
// that is why a document started within budget always closes within max_tokens, even when the
// model (random weights, say) would wander inside a string forever. Inside a string, tokens that
// only continue it are decided from a per-token table (TokenVocabulary::string_tail) and only the
// others are walked: that is most of a step's work on a large vocabulary. Stop tokens pass only when
// the document is complete; finished() ends the request as soon as nothing more may follow.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar.hpp"
#include "json_machine.hpp"
#include "token_constraint.hpp"
#include "token_vocabulary.hpp"

namespace tandem::engine::structured {

class JsonConstraint final : public runtime::TokenConstraint {
 public:
  // `stop_ids`: tokens that end generation (eos); `max_tokens`: the request's whole budget.
  JsonConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab,
                 std::vector<std::int32_t> stop_ids, int max_tokens);

  void mask(std::span<float> logits) override;
  void advance(std::int32_t token) override;
  bool finished() const override { return ended_ || machine_.finished(); }

  // The tokens mask() keeps now (ids below the vocabulary's size), in id order.
  std::vector<std::int32_t> allowed_tokens();
  const JsonMachine& machine() const { return machine_; }
  int tokens_taken() const { return taken_; }
  // A token that the mask would have removed was advanced (never from the engine).
  bool violated() const { return violated_; }

 private:
  void compute_allowed();
  void walk(const std::vector<TokenVocabulary::TrieNode>& nodes, int left);

  JsonMachine machine_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<std::int32_t> stop_ids_;
  int budget_;
  int taken_ = 0;
  bool ended_ = false;
  bool violated_ = false;
  std::vector<char> allowed_;                 // per id, from the last compute_allowed
  std::vector<std::size_t> marks_;            // journal mark per trie depth
};

}  // namespace tandem::engine::structured
