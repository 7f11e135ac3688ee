#include "state_snapshots.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem::engine::kv {

StateSnapshots::StateSnapshots(int capacity) : entries_(static_cast<size_t>(std::max(capacity, 0))) {
  // Never-used entries first, in index order.
  for (int i = 0; i < this->capacity(); ++i) entries_[static_cast<size_t>(i)].lru_pos = lru_.insert(lru_.end(), i);
}

int StateSnapshots::num_kept() const {
  return static_cast<int>(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.kept; }));
}

std::optional<int> StateSnapshots::find(std::uint64_t hash, std::span<const Token> prefix) const {
  // Linear: there are a handful of copies (each holds a whole recurrent state, megabytes to
  // hundreds of megabytes), and a lookup happens once per admission.
  for (int i = 0; i < capacity(); ++i) {
    const Entry& e = entries_[static_cast<size_t>(i)];
    if (e.kept && e.hash == hash && std::equal(e.prefix.begin(), e.prefix.end(), prefix.begin(), prefix.end())) return i;
  }
  return std::nullopt;
}

bool StateSnapshots::contains(std::uint64_t hash, std::span<const Token> prefix) const { return find(hash, prefix).has_value(); }

void StateSnapshots::pin(int index) {
  Entry& e = entries_.at(static_cast<size_t>(index));
  if (e.pins++ == 0) lru_.erase(e.lru_pos);
}

void StateSnapshots::unpin(int index) {
  Entry& e = entries_.at(static_cast<size_t>(index));
  // Invariant: the KV manager unpins exactly what it pinned.
  if (e.pins <= 0) throw std::logic_error("StateSnapshots: unpin of an unpinned copy");
  if (--e.pins == 0) e.lru_pos = lru_.insert(lru_.end(), index);  // most recently used
}

std::optional<int> StateSnapshots::acquire(std::uint64_t hash, std::span<const Token> prefix) {
  const auto i = find(hash, prefix);
  if (i) pin(*i);
  return i;
}

std::optional<int> StateSnapshots::reserve() {
  if (lru_.empty()) return std::nullopt;
  const int i = lru_.front();
  pin(i);
  Entry& e = entries_[static_cast<size_t>(i)];
  e.kept = false;
  e.prefix.clear();
  return i;
}

void StateSnapshots::commit(int index, std::uint64_t hash, std::span<const Token> prefix) {
  // One copy per prefix: an older one (kept while this was written) is forgotten, so lookups
  // never have two answers.
  if (const auto old = find(hash, prefix); old && *old != index) entries_[static_cast<size_t>(*old)].kept = false;
  Entry& e = entries_.at(static_cast<size_t>(index));
  e.kept = true;
  e.hash = hash;
  e.prefix.assign(prefix.begin(), prefix.end());
  unpin(index);
}

void StateSnapshots::abandon(int index) {
  Entry& e = entries_.at(static_cast<size_t>(index));
  e.kept = false;
  e.prefix.clear();
  unpin(index);
  // Nothing in it: reuse it before any copy that holds a state.
  if (e.pins == 0) lru_.splice(lru_.begin(), lru_, e.lru_pos);
}

}  // namespace tandem::engine::kv
