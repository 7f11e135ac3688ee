// Encode and decode on a fixed tokenizer (tests/tokenizer/data/small_bpe, a byte-level BPE with
// added special tokens): any bytes must encode, round-trip exactly through decode_bytes, decode
// to valid UTF-8, and stream-decode to the same text; any ids (the input read as int32s, as
// /v1/completions takes them) must decode without harm.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "tandem/tokenizer/stream_decoder.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace {

const tandem::tokenizer::Tokenizer& tokenizer() {
  static const auto* t = [] {
    auto loaded = tandem::tokenizer::Tokenizer::load(TANDEM_FUZZ_TOKENIZER);
    if (!loaded) {
      std::fprintf(stderr, "cannot load %s: %s\n", TANDEM_FUZZ_TOKENIZER, loaded.error().message.c_str());
      std::exit(1);
    }
    return new tandem::tokenizer::Tokenizer(std::move(loaded.value()));
  }();
  return *t;
}

// The UTF-8 rules HF's decode follows: shortest forms, no surrogates, nothing past U+10FFFF.
bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3Fu);
    }
    const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& t = tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    const auto ids = t.encode(text, special);
    if (!special) tandem::fuzz::check(t.decode_bytes(ids, false) == text, "decode_bytes(encode(s)) != s");
    const std::string decoded = t.decode(ids, false);
    tandem::fuzz::check(valid_utf8(decoded), "decode gave invalid UTF-8");
    tandem::tokenizer::StreamDecoder stream(t, false);
    std::string streamed;
    for (auto id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    tandem::fuzz::check(streamed == decoded, "stream decoding differs from decode");
  }

  FuzzedDataProvider in(data, size);
  std::vector<std::int32_t> ids;
  while (in.remaining_bytes() >= sizeof(std::int32_t)) ids.push_back(in.ConsumeIntegral<std::int32_t>());
  for (bool skip : {false, true}) {
    tandem::fuzz::check(valid_utf8(t.decode(ids, skip)), "decode of arbitrary ids gave invalid UTF-8");
    tandem::tokenizer::StreamDecoder stream(t, skip);
    for (auto id : ids) (void)stream.push(id);
    (void)stream.finish();
  }
  return 0;
}
