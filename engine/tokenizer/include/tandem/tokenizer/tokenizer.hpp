// Reader of Hugging Face tokenizer.json for byte-level BPE models (GPT-2, Qwen, GLM, Llama 3 style).
// Pipeline, as the tokenizers library runs it: added tokens are cut out first, the rest is
// normalized, pre-tokenized (regex Split + ByteLevel), merged by BPE rank, then post-processed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::tokenizer {

// Ids of the roles a server needs; from tokenizer_config.json when it names them.
struct SpecialTokenIds {
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
  std::optional<int32_t> pad;
  std::optional<int32_t> unk;
};

class Tokenizer {
 public:
  // Reads tokenizer.json; tokenizer_config.json beside it is read too when it exists.
  static Result<Tokenizer> load(const std::filesystem::path& tokenizer_json);
  // Explicit config path (may be empty: no config).
  static Result<Tokenizer> load(const std::filesystem::path& tokenizer_json,
                                const std::filesystem::path& tokenizer_config_json);
  // From JSON text already in memory; `origin` names it in error messages.
  static Result<Tokenizer> from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                                     std::string_view origin = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Any bytes are accepted: invalid UTF-8 is encoded byte by byte, so nothing is lost or crashes.
  // add_special_tokens applies the post-processor template (for example a BOS token).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  // Text as valid UTF-8 (an incomplete or invalid byte sequence becomes U+FFFD, as HF does).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // The raw bytes: decode_bytes(encode(s)) == s for any s when tokenizer.json has no normalizer
  // and no added token with lstrip/rstrip; with NFC (Qwen and GLM ask for it) text the normalizer
  // changes comes back normalized, and a stripping token's neighbouring whitespace is gone, as in HF.
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // The bytes one id stands for (empty for an unknown id); what streaming is built on.
  std::string_view token_bytes(int32_t id) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // Size of the id space, added tokens included (largest id + 1): the embedding table's rows.
  std::size_t vocab_size() const;
  bool is_special(int32_t id) const;
  const SpecialTokenIds& special_ids() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::tokenizer
