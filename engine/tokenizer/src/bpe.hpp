// The BPE model: a word (already mapped to byte-level characters) starts as one symbol per
// character and repeatedly merges the adjacent pair with the lowest merge rank. Results are cached
// per word because real text repeats words constantly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "string_map.hpp"
#include "tandem/result.hpp"

namespace tandem::tokenizer {

// Ids index dense tables (id -> token string), so one stray id of 2,000,000,000 would ask for 64 GB:
// ids are bounded well above every real vocabulary (the largest are near 300,000).
inline constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 22;

class Bpe {
 public:
  // `model` is tokenizer.json's "model" value; only type "BPE" is accepted.
  static Result<Bpe> from_json(const nlohmann::json& model);

  Bpe(Bpe&& other) noexcept;
  Bpe& operator=(Bpe&&) = delete;

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  const TokenIdMap& vocab() const { return vocab_; }

  static constexpr std::size_t kCacheEntries = 100000;  // cleared when full: bounded memory
  static constexpr std::size_t kCacheMaxWordBytes = 256;

 private:
  Bpe() = default;
  void merge(std::string_view word, std::vector<int32_t>& ids) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;

  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  TokenIdMap vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace tandem::tokenizer
