// Encode and decode on a loaded tokenizer: the pipeline order is HF's (added tokens, normalize,
// added tokens again on normalized text, pre-tokenize, BPE, post-process).
#include "tandem/tokenizer/tokenizer.hpp"

#include "byte_level.hpp"
#include "impl.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tokenizer {
namespace {

void encode_plain(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& ids) {
  impl.pre_tokenizer.apply(text, [&](std::string_view word) { impl.model.encode_word(word, ids); });
}

void encode_normalized(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& ids) {
  const std::string normalized = impl.normalizer.apply(text);
  if (impl.normalized_added.empty()) {
    encode_plain(impl, normalized, ids);
    return;
  }
  std::vector<Segment> segments;
  impl.normalized_added.split(normalized, segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) ids.push_back(s.id);
    else encode_plain(impl, s.text, ids);
  }
}

void encode_valid(const Tokenizer::Impl& impl, std::string_view text, std::vector<int32_t>& ids) {
  std::vector<Segment> segments;
  impl.raw_added.split(text, segments);
  for (const Segment& s : segments) {
    if (s.id >= 0) ids.push_back(s.id);
    else encode_normalized(impl, s.text, ids);
  }
}

// Bytes that are not UTF-8 cannot go through normalization or the regex. Byte-level vocabularies
// have a token for every byte, so each such byte becomes that token and decoding restores it.
void encode_invalid(const Tokenizer::Impl& impl, std::string_view bytes, std::vector<int32_t>& ids) {
  for (const char c : bytes) {
    const auto& ch = byte_level::byte_to_char()[static_cast<unsigned char>(c)];
    if (const auto it = impl.model.vocab().find(ch); it != impl.model.vocab().end()) {
      ids.push_back(it->second);
    } else {
      encode_valid(impl, "\xEF\xBF\xBD", ids);  // no byte tokens: U+FFFD, as a lossy decode would give
    }
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = impl_->post_processor.prefix;
  // Valid runs go through the whole pipeline; invalid bytes are handled one by one between them.
  std::size_t run_start = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const utf8::Step st = utf8::step(text, pos);
    if (st.kind == utf8::StepKind::Valid) {
      pos += st.length;
      continue;
    }
    if (pos > run_start) encode_valid(*impl_, text.substr(run_start, pos - run_start), ids);
    encode_invalid(*impl_, text.substr(pos, st.length), ids);
    pos += st.length;
    run_start = pos;
  }
  if (pos > run_start) encode_valid(*impl_, text.substr(run_start, pos - run_start), ids);
  if (add_special_tokens) ids.insert(ids.end(), impl_->post_processor.suffix.begin(), impl_->post_processor.suffix.end());
  return ids;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  for (const int32_t id : ids) {
    // Ids outside the vocabulary are skipped, as HF does, rather than failing a whole response.
    if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_bytes.size()) continue;
    if (skip_special_tokens && impl_->special[static_cast<std::size_t>(id)]) continue;
    out += impl_->id_bytes[static_cast<std::size_t>(id)];
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return utf8::to_valid_lossy(decode_bytes(ids, skip_special_tokens));
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[static_cast<std::size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  if (const auto it = impl_->model.vocab().find(token); it != impl_->model.vocab().end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_token.size()) return std::nullopt;
  const auto& t = impl_->id_to_token[static_cast<std::size_t>(id)];
  if (t.empty()) return std::nullopt;  // a hole in a sparse vocabulary
  return t;
}

std::size_t Tokenizer::vocab_size() const { return impl_->id_to_token.size(); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->special.size() && impl_->special[static_cast<std::size_t>(id)];
}

const SpecialTokenIds& Tokenizer::special_ids() const { return impl_->special_ids; }

}  // namespace tandem::tokenizer
