// Incremental detokenizer for streamed output: ids arrive one at a time, and each push returns
// only text whose UTF-8 is complete, holding back the first bytes of a multibyte character until
// the rest arrives. The concatenation of all pushes and finish() equals Tokenizer::decode.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tandem/tokenizer/tokenizer.hpp"

namespace tandem::tokenizer {

class StreamDecoder {
 public:
  // The tokenizer must outlive the decoder.
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Text that became complete with these ids (often empty mid-character).
  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);
  // End of stream: held bytes that never completed come out as U+FFFD.
  std::string finish();
  // Bytes held back waiting for the rest of a character (0..3).
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string emit_complete();

  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace tandem::tokenizer
