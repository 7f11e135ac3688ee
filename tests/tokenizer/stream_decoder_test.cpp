// The streaming detokenizer must emit exactly what one-shot decode gives, whatever the chunking,
// and never half a character.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "golden.hpp"
#include "tandem/tokenizer/stream_decoder.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

using tandem::tokenizer::StreamDecoder;
using tandem::tokenizer::Tokenizer;
using tandem::tokenizer::test::small_bpe_path;

namespace {
Tokenizer small() {
  auto tok = Tokenizer::load(small_bpe_path());
  REQUIRE(tok.ok());
  return std::move(tok.value());
}

// No character is cut: every lead byte has all its continuation bytes in the same piece.
bool is_complete_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (len == 0 || i + len > s.size()) return false;
    i += len;
  }
  return true;
}

// Multibyte text whose characters the small vocabulary mostly spells byte by byte.
const std::vector<std::string> kTexts = {
    "中文分词测试：今天天气很好。", "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️", "Ünïcödé àccents: café, naïve",
    "日本語のテキスト and ASCII mixed 한국어", "ไทย ภาษาไทย", "Math: ∑ x² ≤ ∞, α β γ",
};
}  // namespace

TEST_CASE("stream: for every split point, two pushes plus finish equal one-shot decode") {
  const Tokenizer tok = small();
  for (const auto& text : kTexts) {
    const auto ids = tok.encode(text, false);
    const std::string expected = tok.decode(ids, false);
    REQUIRE(expected == text);
    for (std::size_t k = 0; k <= ids.size(); ++k) {
      CAPTURE(text);
      CAPTURE(k);
      StreamDecoder stream(tok, false);
      const std::string a = stream.push(std::span(ids).first(k));
      const std::string b = stream.push(std::span(ids).subspan(k));
      CHECK(is_complete_utf8(a));
      CHECK(a + b + stream.finish() == expected);
    }
  }
}

TEST_CASE("stream: one id at a time never emits a partial character") {
  const Tokenizer tok = small();
  for (const auto& text : kTexts) {
    const auto ids = tok.encode(text, false);
    StreamDecoder stream(tok, false);
    std::string got;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      CHECK(is_complete_utf8(piece));
      CHECK(stream.pending_bytes() <= 3);
      got += piece;
    }
    CHECK(stream.pending_bytes() == 0);
    CHECK(got + stream.finish() == text);
  }
}

TEST_CASE("stream: a character cut off at the end becomes U+FFFD, as in one-shot decode") {
  const Tokenizer tok = small();
  auto ids = tok.encode("ok 😀", false);
  // Byte-level tokens for the first two bytes of another emoji: an unfinished character.
  const auto cut = tok.encode(std::string("\xF0\x9F"), false);
  ids.insert(ids.end(), cut.begin(), cut.end());
  StreamDecoder stream(tok, false);
  std::string got = stream.push(ids);
  CHECK(got == "ok 😀");
  CHECK(stream.pending_bytes() == 2);
  got += stream.finish();
  CHECK(got == tok.decode(ids, false));
  CHECK(got == "ok 😀\xEF\xBF\xBD");
}

TEST_CASE("stream: skip_special_tokens drops special ids like decode does") {
  const Tokenizer tok = small();
  const auto ids = tok.encode("<|im_start|>中文<|im_end|>", false);
  StreamDecoder stream(tok, true);
  std::string got;
  for (const int32_t id : ids) got += stream.push(id);
  CHECK(got + stream.finish() == tok.decode(ids, true));
  CHECK(tok.decode(ids, true) == "中文");
}
