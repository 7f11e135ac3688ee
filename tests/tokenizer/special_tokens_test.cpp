// Added and special tokens on the small tokenizer: matched before pre-tokenization, longest
// first, with the lstrip/rstrip flags, and skipped on decode only when special.
#include <doctest/doctest.h>

#include <vector>

#include "golden.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

using tandem::tokenizer::Tokenizer;
using tandem::tokenizer::test::small_bpe_path;

namespace {
Tokenizer small() {
  auto tok = Tokenizer::load(small_bpe_path());
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  return std::move(tok.value());
}
int32_t id(const Tokenizer& tok, const char* token) {
  const auto v = tok.token_to_id(token);
  REQUIRE_MESSAGE(v.has_value(), token);
  return *v;
}
}  // namespace

TEST_CASE("special tokens inside text become one id each, longest match first") {
  const Tokenizer tok = small();
  const auto ids = tok.encode("a<|im_start|>b", false);
  REQUIRE(ids.size() == 3);
  CHECK(ids[1] == id(tok, "<|im_start|>"));
  // "<|im" is itself an added token; the longer "<|im_end|>" wins where both match.
  const auto end = tok.encode("<|im_end|>", false);
  CHECK(end == std::vector<int32_t>{id(tok, "<|im_end|>")});
  const auto partial = tok.encode("<|im_en", false);
  CHECK(partial.front() == id(tok, "<|im"));
}

TEST_CASE("lstrip swallows whitespace on the left, rstrip on the right") {
  const Tokenizer tok = small();
  CHECK(tok.encode("x   <mask>", false) == tok.encode("x<mask>", false));
  CHECK(tok.encode("[END]   y", false) == tok.encode("[END]y", false));
  // Without the flag, whitespace stays text.
  CHECK(tok.encode("x <think>", false) != tok.encode("x<think>", false));
}

TEST_CASE("decode skips special tokens only when asked, and never plain added tokens") {
  const Tokenizer tok = small();
  const auto ids = tok.encode("<|im_start|>hi<think>ok</think><|im_end|>", false);
  CHECK(tok.decode(ids, false) == "<|im_start|>hi<think>ok</think><|im_end|>");
  CHECK(tok.decode(ids, true) == "hi<think>ok</think>");
  CHECK(tok.is_special(id(tok, "<|im_end|>")));
  CHECK_FALSE(tok.is_special(id(tok, "<think>")));
}

TEST_CASE("add_special_tokens applies the post-processor template; config names the roles") {
  const Tokenizer tok = small();
  const auto bos = id(tok, "<|endoftext|>");
  const auto with = tok.encode("hello", true);
  const auto without = tok.encode("hello", false);
  REQUIRE(with.size() == without.size() + 1);
  CHECK(with.front() == bos);
  CHECK(tok.special_ids().bos == bos);
  CHECK(tok.special_ids().eos == id(tok, "<|im_end|>"));  // written as an object in the config
  CHECK(tok.special_ids().pad == bos);
  CHECK(tok.vocab_size() == static_cast<std::size_t>(id(tok, "<|im")) + 1);
  CHECK(tok.id_to_token(id(tok, "<mask>")) == "<mask>");
  CHECK_FALSE(tok.id_to_token(-1).has_value());
  CHECK_FALSE(tok.id_to_token(1 << 30).has_value());
  CHECK_FALSE(tok.token_to_id("no such token").has_value());
}
