#include "token_vocabulary.hpp"

#include <algorithm>
#include <cstdio>

namespace tandem::engine::structured {

std::string_view TokenVocabulary::bytes(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= bytes_.size()) return {};
  return bytes_[static_cast<std::size_t>(id)];
}

Result<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::build(const tokenizer::Tokenizer& tokenizer) {
  auto v = std::make_shared<TokenVocabulary>();
  const std::size_t n = tokenizer.vocab_size();
  v->bytes_.resize(n);
  v->next_same_.assign(n, -1);
  std::vector<std::int32_t> order;
  bool single[256] = {};
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<std::int32_t>(i);
    if (tokenizer.is_special(id)) continue;
    std::string_view b = tokenizer.token_bytes(id);
    if (b.empty()) continue;
    v->bytes_[i] = std::string(b);
    if (b.size() == 1) single[static_cast<unsigned char>(b[0])] = true;
    order.push_back(id);
  }
  for (int c = 0; c < 256; ++c)
    if (!single[c]) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return Error{std::string("the vocabulary has no token for the single byte ") + hex +
                   "; structured output needs a byte-level vocabulary"};
    }
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return v->bytes_[static_cast<std::size_t>(a)] < v->bytes_[static_cast<std::size_t>(b)];
  });
  v->ordinary_ = order.size();

  // Pre-order trie from the sorted strings: `path` holds the open nodes of the previous string.
  std::vector<std::uint32_t> path;
  std::string_view prev;
  for (std::int32_t id : order) {
    std::string_view b = v->bytes_[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    while (path.size() > common) {
      v->nodes_[path.back()].end = static_cast<std::uint32_t>(v->nodes_.size());
      path.pop_back();
    }
    for (std::size_t d = common; d < b.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<unsigned char>(b[d]);
      node.depth = static_cast<std::uint16_t>(d + 1);
      path.push_back(static_cast<std::uint32_t>(v->nodes_.size()));
      v->nodes_.push_back(node);
    }
    TrieNode& at = v->nodes_[path.back()];
    v->next_same_[static_cast<std::size_t>(id)] = at.first_token;
    at.first_token = id;
    v->max_depth_ = std::max(v->max_depth_, b.size());
    prev = b;
  }
  while (!path.empty()) {
    v->nodes_[path.back()].end = static_cast<std::uint32_t>(v->nodes_.size());
    path.pop_back();
  }
  return std::shared_ptr<const TokenVocabulary>(std::move(v));
}

}  // namespace tandem::engine::structured
