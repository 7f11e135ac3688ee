// tokenizer.json (and tokenizer_config.json) loading: the input is TOKENIZER_JSON, optionally
// followed by a NUL byte and the config JSON. A tokenizer that loads must then encode and decode
// a fixed text, every id it hands out < vocab_size. (Lossless round trips need a vocabulary with
// all 256 byte tokens, which a loaded file need not have: tokenizer_encode_fuzz checks those.)
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? std::string_view{} : input.substr(nul + 1);

  auto tok = tandem::tokenizer::Tokenizer::from_json(json, config, "fuzz/tokenizer.json");
  if (!tok) return 0;
  const auto& t = tok.value();
  constexpr std::string_view text = "Hello, world! <|im_start|>user\n  naïve café 12345 \xF0\x9F\x98\x80 \xFF end";
  for (bool special : {false, true}) {
    const auto ids = t.encode(text, special);
    for (auto id : ids) tandem::fuzz::check(id >= 0 && static_cast<std::size_t>(id) < t.vocab_size(), "an id past vocab_size");
    (void)t.decode_bytes(ids, false);
    (void)t.decode(ids, true);
  }
  return 0;
}
