// Added tokens (special ones like "<|im_start|>" and plain ones like "<think>") are found in the
// text before anything else, longest match first, so BPE never splits them. Tokens flagged
// `normalized` are matched after normalization, the others on the raw text, as HF does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool single_word = false;  // only match when not inside a word
};

// A piece of text: either an added token (id >= 0) or plain text to tokenize (id < 0).
struct Segment {
  std::string_view text;
  int32_t id = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher();
  // `patterns[i]` is what to look for (content, or normalized content) for `tokens[i]`.
  void add(std::string pattern, const AddedToken& token);
  bool empty() const { return entries_.empty(); }

  // Splits `text` into plain segments and token segments (lstrip/rstrip whitespace goes away).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Entry {
    std::string pattern;
    AddedToken token;
  };
  struct Node {
    int32_t child[256];
    int32_t entry = -1;
  };
  std::vector<Entry> entries_;
  std::vector<Node> trie_;
};

}  // namespace tandem::tokenizer
