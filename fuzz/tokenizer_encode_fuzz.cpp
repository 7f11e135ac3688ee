// Encode and decode on a fixed tokenizer (engine/serve/assets/demo_tokenizer, a byte-level BPE with
// added special tokens and an NFC normalizer): any bytes must encode, decode to valid UTF-8, and
// stream-decode to the same text; any ids (the input read as int32s, as /v1/completions takes
// them) must decode without harm. The same tokenizer without its normalizer and with no added
// token stripping whitespace must round-trip exactly: decode_bytes(encode(s)) == s (with NFC,
// non-NFC text comes back normalized; <mask> has lstrip and eats the whitespace before it).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "tandem/tokenizer/stream_decoder.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace {

tandem::tokenizer::Tokenizer load(bool lossy) {
  std::ifstream in(TANDEM_FUZZ_TOKENIZER);
  auto json = nlohmann::json::parse(in, nullptr, false);
  if (json.is_discarded()) {
    std::fprintf(stderr, "cannot read %s as JSON\n", TANDEM_FUZZ_TOKENIZER);
    std::exit(1);
  }
  if (!lossy) {  // what the exact round trip needs: nothing that rewrites or eats text
    json["normalizer"] = nullptr;
    for (auto& t : json["added_tokens"]) t["lstrip"] = t["rstrip"] = false;
  }
  auto loaded = tandem::tokenizer::Tokenizer::from_json(json.dump(), {}, TANDEM_FUZZ_TOKENIZER);
  if (!loaded) {
    std::fprintf(stderr, "cannot load %s: %s\n", TANDEM_FUZZ_TOKENIZER, loaded.error().message.c_str());
    std::exit(1);
  }
  return std::move(loaded.value());
}

const tandem::tokenizer::Tokenizer& tokenizer() {
  static const tandem::tokenizer::Tokenizer t = load(true);
  return t;
}

const tandem::tokenizer::Tokenizer& unnormalized() {
  static const tandem::tokenizer::Tokenizer t = load(false);
  return t;
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
  const auto& raw = unnormalized();
  tandem::fuzz::check(raw.decode_bytes(raw.encode(text, false), false) == text, "decode_bytes(encode(s)) != s");
  for (bool special : {false, true}) {
    const auto ids = t.encode(text, special);
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
