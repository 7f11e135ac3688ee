#include "json_constraint.hpp"

#include <algorithm>
#include <limits>

namespace tandem::engine::structured {

JsonConstraint::JsonConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab,
                               std::vector<std::int32_t> stop_ids, int max_tokens)
    : machine_(std::move(grammar)), vocab_(std::move(vocab)), stop_ids_(std::move(stop_ids)), budget_(max_tokens) {
  marks_.resize(vocab_->max_depth() + 1);
}

void JsonConstraint::walk(const std::vector<TokenVocabulary::TrieNode>& nodes, int left) {
  marks_[0] = machine_.checkpoint();
  for (std::size_t i = 0; i < nodes.size();) {
    const auto& node = nodes[i];
    machine_.rollback(marks_[node.depth - 1u]);
    if (!machine_.feed(node.byte)) {
      i = node.end;  // no token with this prefix can continue the document
      continue;
    }
    marks_[node.depth] = machine_.checkpoint();
    if (node.first_token >= 0 && machine_.min_close() <= left)
      for (std::int32_t id = node.first_token; id >= 0; id = vocab_->next_same(id)) allowed_[static_cast<std::size_t>(id)] = 1;
    ++i;
  }
  machine_.rollback(marks_[0]);
}

void JsonConstraint::compute_allowed() {
  allowed_.assign(vocab_->size(), 0);
  const int left = budget_ - taken_ - 1;  // tokens after the one being chosen
  machine_.commit();
  if (machine_.in_plain_string()) {
    // Most of a vocabulary just continues a string, whatever encloses it: those tokens are
    // decided from a table, and only the rest (quotes, backslashes, ...) are walked.
    const int base = machine_.min_close();
    for (std::size_t id = 0; id < allowed_.size(); ++id) {
      const int tail = vocab_->string_tail(static_cast<std::int32_t>(id));
      if (tail >= 0 && base + tail <= left) allowed_[id] = 1;
    }
    walk(vocab_->string_exit_nodes(), left);
  } else {
    walk(vocab_->nodes(), left);
  }
  if (machine_.accepting())
    for (std::int32_t id : stop_ids_)
      if (id >= 0 && static_cast<std::size_t>(id) < allowed_.size()) allowed_[static_cast<std::size_t>(id)] = 1;
}

void JsonConstraint::mask(std::span<float> logits) {
  compute_allowed();
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  for (std::size_t id = 0; id < logits.size(); ++id)
    if (id >= allowed_.size() || !allowed_[id]) logits[id] = kOff;
}

std::vector<std::int32_t> JsonConstraint::allowed_tokens() {
  compute_allowed();
  std::vector<std::int32_t> out;
  for (std::size_t id = 0; id < allowed_.size(); ++id)
    if (allowed_[id]) out.push_back(static_cast<std::int32_t>(id));
  return out;
}

void JsonConstraint::advance(std::int32_t token) {
  ++taken_;
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    if (!machine_.accepting()) violated_ = true;
    ended_ = true;
    return;
  }
  const std::string_view b = vocab_->bytes(token);
  if (b.empty() || !machine_.feed(b) || machine_.min_close() > budget_ - taken_) {
    violated_ = true;
    ended_ = true;  // the output can no longer become a valid document; stop spending tokens on it
  }
  machine_.commit();
}

}  // namespace tandem::engine::structured
