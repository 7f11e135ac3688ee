// The tokenizer's vocabulary as a byte trie for the token mask: every ordinary token's bytes,
// sorted, laid out in pre-order with each node's subtree end, so a walk that finds a prefix
// impossible skips every token under it at once. Special tokens (they decode to nothing) are left
// out; the mask lets stop tokens through by id instead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/result.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace tandem::engine::structured {

class TokenVocabulary {
 public:
  struct TrieNode {
    std::uint32_t end = 0;         // one past the last node of this subtree
    std::int32_t first_token = -1;  // a token whose bytes end here (-1: none); more via next_same
    std::uint16_t depth = 0;        // bytes from the root (1 for a first byte)
    unsigned char byte = 0;
  };

  // Fails when some byte has no token of its own: the budget logic relies on closing a document
  // one byte per token, which byte-level BPE vocabularies always allow.
  static Result<std::shared_ptr<const TokenVocabulary>> build(const tokenizer::Tokenizer& tokenizer);

  const std::vector<TrieNode>& nodes() const { return nodes_; }
  // The same for the tokens that are not string_tail tokens: all a walk inside a string must try.
  const std::vector<TrieNode>& string_exit_nodes() const { return exit_nodes_; }
  // For a token that, written inside a string at a character boundary, stays inside it (no quote,
  // backslash or control byte, valid UTF-8): how many continuation bytes it leaves due (0-3).
  // -1 for every other token.
  int string_tail(std::int32_t id) const { return string_tail_[static_cast<std::size_t>(id)]; }
  std::int32_t next_same(std::int32_t id) const { return next_same_[static_cast<std::size_t>(id)]; }
  std::string_view bytes(std::int32_t id) const;
  std::size_t size() const { return bytes_.size(); }  // ids [0, size) are the tokenizer's
  std::size_t max_depth() const { return max_depth_; }
  std::size_t ordinary_tokens() const { return ordinary_; }

 private:
  std::vector<std::string> bytes_;  // per id; empty for special and unknown ids
  std::vector<TrieNode> nodes_;
  std::vector<TrieNode> exit_nodes_;
  std::vector<std::int8_t> string_tail_;
  std::vector<std::int32_t> next_same_;
  std::size_t max_depth_ = 0;
  std::size_t ordinary_ = 0;
};

}  // namespace tandem::engine::structured
