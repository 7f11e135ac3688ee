#include "tandem/tokenizer/stream_decoder.hpp"

#include "tandem/utf8.hpp"

namespace tandem::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::emit_complete() {
  // Hold back only a sequence that is still a valid prefix; everything before it is final, and
  // decoding it lossily here gives the same text a one-shot decode would.
  const std::size_t hold = utf8::truncated_tail(pending_);
  std::string text = utf8::to_valid_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return text;
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  return emit_complete();
}

std::string StreamDecoder::push(std::span<const int32_t> ids) {
  for (const int32_t id : ids) {
    if (!(skip_special_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  }
  return emit_complete();
}

std::string StreamDecoder::finish() {
  std::string text = utf8::to_valid_lossy(pending_);
  pending_.clear();
  return text;
}

}  // namespace tandem::tokenizer
