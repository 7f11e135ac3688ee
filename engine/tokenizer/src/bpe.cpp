#include "bpe.hpp"

#include <cstdio>
#include <limits>
#include <queue>

#include <nlohmann/json.hpp>

#include "json_fields.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tokenizer {
namespace {

// A merge tokenizer.json spells as "a b" (older files) or ["a", "b"] (newer ones, which allow
// spaces inside tokens).
Result<std::pair<std::string, std::string>> merge_parts(const nlohmann::json& m) {
  if (m.is_string()) {
    const auto& s = m.get_ref<const std::string&>();
    const auto space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return Error{"expected \"left right\" with exactly one space, got \"" + s + "\""};
    }
    return std::pair{s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::pair{m[0].get<std::string>(), m[1].get<std::string>()};
  }
  return Error{"expected a string \"left right\" or an array [\"left\", \"right\"]"};
}

bool empty_or_null(const nlohmann::json& model, const char* key) {
  const auto it = model.find(key);
  return it == model.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
}

}  // namespace

Bpe::Bpe(Bpe&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      merges_(std::move(other.merges_)),
      unk_(other.unk_),
      fuse_unk_(other.fuse_unk_),
      byte_fallback_(other.byte_fallback_),
      ignore_merges_(other.ignore_merges_) {}

Result<Bpe> Bpe::from_json(const nlohmann::json& model) {
  if (!model.is_object()) return Error{"model: expected an object"};
  const std::string type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "BPE";
  if (type != "BPE") {
    return Error{"model.type: \"" + type + "\" is not supported; this reader handles byte-level \"BPE\" models only"};
  }
  if (!empty_or_null(model, "continuing_subword_prefix") || !empty_or_null(model, "end_of_word_suffix")) {
    return Error{"model: continuing_subword_prefix / end_of_word_suffix are not supported (byte-level BPE has neither)"};
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return Error{"model.dropout: BPE dropout is training-only randomness; expected null"};
  }

  Bpe bpe;
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return Error{"model.vocab: missing or not an object (expected {\"token\": id, ...})"};
  }
  bpe.vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId) {
      return Error{"model.vocab[\"" + token + "\"]: expected an integer id 0.." + std::to_string(kMaxTokenId - 1)};
    }
    bpe.vocab_.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }

  const auto merges = model.find("merges");
  if (merges != model.end() && !merges->is_null()) {
    if (!merges->is_array()) return Error{"model.merges: expected an array"};
    bpe.merges_.reserve(merges->size());
    int32_t rank = 0;
    for (const auto& m : *merges) {
      const std::string where = "model.merges[" + std::to_string(rank) + "]";
      auto parts = merge_parts(m);
      if (!parts) return parts.error().with_context(where);
      const auto& [left, right] = parts.value();
      const auto a = bpe.vocab_.find(left);
      const auto b = bpe.vocab_.find(right);
      const auto ab = bpe.vocab_.find(left + right);
      if (a == bpe.vocab_.end() || b == bpe.vocab_.end() || ab == bpe.vocab_.end()) {
        return Error{where + ": \"" + left + "\", \"" + right + "\" or their concatenation is not in model.vocab"};
      }
      // A repeated pair takes its last rank, as HF's map building does.
      bpe.merges_.insert_or_assign(pair_key(a->second, b->second), Merge{rank, ab->second});
      ++rank;
    }
  }

  if (!empty_or_null(model, "unk_token")) {
    if (!model["unk_token"].is_string()) return Error{"model.unk_token: expected a string or null"};
    const auto unk = bpe.vocab_.find(model["unk_token"].get<std::string>());
    if (unk == bpe.vocab_.end()) return Error{"model.unk_token: not in model.vocab"};
    bpe.unk_ = unk->second;
  }
  for (auto [key, dest] : {std::pair{"fuse_unk", &bpe.fuse_unk_}, std::pair{"byte_fallback", &bpe.byte_fallback_},
                           std::pair{"ignore_merges", &bpe.ignore_merges_}}) {
    auto v = bool_field(model, key, false, "model");
    if (!v) return v.error();
    *dest = v.value();
  }
  return bpe;
}

void Bpe::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  bool last_unk = false;
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t len = utf8::step(word, pos).length;
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      ids.push_back(it->second);
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (const char c : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned>(static_cast<unsigned char>(c)));
        const auto it = vocab_.find(std::string_view(name));
        if (it == vocab_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == ch.size()) {
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        last_unk = false;
        continue;
      }
    }
    // A character the vocabulary cannot spell: the unknown token, or nothing when there is none.
    if (unk_ && !(fuse_unk_ && last_unk)) ids.push_back(*unk_);
    last_unk = unk_.has_value();
  }
}

void Bpe::merge(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> id;
  initial_symbols(word, id);
  const auto n = static_cast<int32_t>(id.size());
  // Doubly linked symbols; a merge keeps the left slot and unlinks the right one.
  std::vector<int32_t> prev(id.size()), next(id.size());
  for (int32_t i = 0; i < n; ++i) {
    prev[static_cast<std::size_t>(i)] = i - 1;
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    // Lowest rank first; among equal ranks the leftmost, as HF orders its queue.
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t nx = next[static_cast<std::size_t>(pos)];
    if (nx < 0) return;
    const int32_t l = id[static_cast<std::size_t>(pos)];
    const int32_t r = id[static_cast<std::size_t>(nx)];
    if (const auto it = merges_.find(pair_key(l, r)); it != merges_.end()) queue.push({it->second.rank, pos, l, r});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> alive(id.size(), true);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const auto p = static_cast<std::size_t>(c.pos);
    // Stale entries: the left symbol was merged away or either side changed since it was queued.
    if (!alive[p] || next[p] < 0) continue;
    const auto q = static_cast<std::size_t>(next[p]);
    if (id[p] != c.left || id[q] != c.right) continue;
    id[p] = merges_.find(pair_key(c.left, c.right))->second.result;
    alive[q] = false;
    next[p] = next[q];
    if (next[q] >= 0) prev[static_cast<std::size_t>(next[q])] = c.pos;
    consider(prev[p]);
    consider(c.pos);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[static_cast<std::size_t>(i)]) out.push_back(id[static_cast<std::size_t>(i)]);
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> result;
  merge(word, result);
  ids.insert(ids.end(), result.begin(), result.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(result));
  }
}

}  // namespace tandem::tokenizer
