// Input that is not valid UTF-8 must neither crash nor lose bytes: each invalid byte becomes
// its byte-level token, decode_bytes restores the input exactly, decode shows U+FFFD.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <string>

#include "golden.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

using tandem::tokenizer::Tokenizer;
using tandem::tokenizer::test::small_bpe_path;

namespace {
Tokenizer small() {
  auto tok = Tokenizer::load(small_bpe_path());
  REQUIRE(tok.ok());
  return std::move(tok.value());
}
}  // namespace

TEST_CASE("invalid UTF-8: bytes round-trip, valid parts encode as usual") {
  const Tokenizer tok = small();
  const std::string bad = std::string("caf\xC3") + " ok \xFF\xFE" + "\xED\xA0\x80" + " end\xF0\x9F\x98";
  const auto ids = tok.encode(bad, false);
  CHECK(tok.decode_bytes(ids, false) == bad);
  const std::string shown = tok.decode(ids, false);
  CHECK(shown.find("\xEF\xBF\xBD") != std::string::npos);
  // The valid text between invalid bytes tokenizes exactly as on its own.
  const auto alone = tok.encode(" ok ", false);
  const auto with_bad = tok.encode(std::string("\xFF") + " ok " + "\xFF", false);
  REQUIRE(with_bad.size() == alone.size() + 2);
  CHECK(std::vector<int32_t>(with_bad.begin() + 1, with_bad.end() - 1) == alone);
}

TEST_CASE("random bytes never crash and always round-trip through decode_bytes") {
  // Without its NFC normalizer, which may legitimately recompose random valid sequences.
  std::ifstream in(small_bpe_path());
  auto spec = nlohmann::json::parse(in);
  spec["normalizer"] = nullptr;
  auto loaded = Tokenizer::from_json(spec.dump());
  REQUIRE(loaded.ok());
  const Tokenizer& tok = loaded.value();
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 64);
  for (int i = 0; i < 500; ++i) {
    std::string s;
    for (int n = length(rng); n > 0; --n) s.push_back(static_cast<char>(byte(rng)));
    const auto ids = tok.encode(s, false);
    CHECK(tok.decode_bytes(ids, false) == s);
  }
}

TEST_CASE("empty input and unknown ids") {
  const Tokenizer tok = small();
  CHECK(tok.encode("", false).empty());
  const std::vector<int32_t> ids = {-5, 1 << 30};
  CHECK(tok.decode(ids, false).empty());
}
