// The small trained tokenizer (engine/serve/assets/demo_tokenizer) against ids from @huggingface/tokenizers.
#include <doctest/doctest.h>

#include "golden.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

using tandem::tokenizer::Tokenizer;
using namespace tandem::tokenizer::test;

TEST_CASE("small BPE: ids match the reference on the whole corpus, and decode gives the reference's text") {
  auto tok = Tokenizer::load(small_bpe_path());
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  const auto cases = read_goldens(data_path("golden/small_bpe_ids.json"));
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(tok->encode(c.text, false) == c.ids);
    CHECK(tok->encode(c.text, true) == c.ids_with_special);
    CHECK(tok->decode(c.ids, false) == c.decoded);
  }
}

TEST_CASE("small BPE: the per-word cache does not change results on a second pass") {
  auto tok = Tokenizer::load(small_bpe_path());
  REQUIRE(tok.ok());
  const auto cases = read_goldens(data_path("golden/small_bpe_ids.json"));
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& c : cases) CHECK(tok->encode(c.text, false) == c.ids);
  }
}
