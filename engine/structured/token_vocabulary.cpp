#include "token_vocabulary.hpp"

#include <algorithm>
#include <cstdio>

#include "json_machine.hpp"

namespace tandem::engine::structured {

namespace {

// Pre-order trie of `order` (ids sorted by their bytes): `path` holds the open nodes of the
// previous string; next_same chains ids with equal bytes.
std::vector<TokenVocabulary::TrieNode> build_trie(const std::vector<std::int32_t>& order,
                                                  const std::vector<std::string>& bytes,
                                                  std::vector<std::int32_t>& next_same, std::size_t& max_depth) {
  std::vector<TokenVocabulary::TrieNode> nodes;
  std::vector<std::uint32_t> path;
  std::string_view prev;
  for (std::int32_t id : order) {
    std::string_view b = bytes[static_cast<std::size_t>(id)];
    std::size_t common = 0;
    while (common < prev.size() && common < b.size() && prev[common] == b[common]) ++common;
    while (path.size() > common) {
      nodes[path.back()].end = static_cast<std::uint32_t>(nodes.size());
      path.pop_back();
    }
    for (std::size_t d = common; d < b.size(); ++d) {
      TokenVocabulary::TrieNode node;
      node.byte = static_cast<unsigned char>(b[d]);
      node.depth = static_cast<std::uint16_t>(d + 1);
      path.push_back(static_cast<std::uint32_t>(nodes.size()));
      nodes.push_back(node);
    }
    TokenVocabulary::TrieNode& at = nodes[path.back()];
    next_same[static_cast<std::size_t>(id)] = at.first_token;
    at.first_token = id;
    max_depth = std::max(max_depth, b.size());
    prev = b;
  }
  while (!path.empty()) {
    nodes[path.back()].end = static_cast<std::uint32_t>(nodes.size());
    path.pop_back();
  }
  return nodes;
}

}  // namespace

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

  v->nodes_ = build_trie(order, v->bytes_, v->next_same_, v->max_depth_);

  // Which tokens stay inside a string: fed after an opening quote, the machine is still in it.
  static const auto string_grammar = *schema_grammar({{"type", "string"}});
  v->string_tail_.assign(n, -1);
  std::vector<std::int32_t> exits;
  for (std::int32_t id : order) {
    const std::string& b = v->bytes_[static_cast<std::size_t>(id)];
    JsonMachine m(string_grammar);
    m.feed('"');
    if (b.find('\\') == std::string::npos && m.feed(b) && m.depth() == 2) {
      v->string_tail_[static_cast<std::size_t>(id)] = static_cast<std::int8_t>(m.min_close() - 1);
    } else {
      exits.push_back(id);
    }
  }
  // Tokens with equal bytes are all exits or none, in the same order: the chains built here equal
  // next_same's, so the scratch copy is dropped.
  std::vector<std::int32_t> scratch(n, -1);
  std::size_t exit_depth = 0;
  v->exit_nodes_ = build_trie(exits, v->bytes_, scratch, exit_depth);
  return std::shared_ptr<const TokenVocabulary>(std::move(v));
}

}  // namespace tandem::engine::structured
