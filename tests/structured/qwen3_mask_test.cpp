// The token mask on a real 151k-token vocabulary (Qwen3's tokenizer.json, unpacked by
// deploy/setup.sh as for tests/tokenizer, or named by TANDEM_QWEN3_TOKENIZER; exit 77 without
// it): the trie walk agrees with the one-by-one check, and its cost per step is measured and
// printed (the number a real model's decode step pays on the CPU).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "constraint_util.hpp"

using namespace tandem::engine::structured;
using namespace tandem::structured_test;
using nlohmann::json;

namespace {

const tandem::tokenizer::Tokenizer& qwen3() {
  static const tandem::tokenizer::Tokenizer tok = [] {
    std::filesystem::path path = std::filesystem::path(TANDEM_BINARY_DIR) / "third_party/tokenizer-qwen3/package/models/tokenizer.json";
    if (const char* env = std::getenv("TANDEM_QWEN3_TOKENIZER")) path = env;
    if (!std::filesystem::exists(path)) {
      std::printf("SKIP: %s not found (deploy/setup.sh unpacks it; or set TANDEM_QWEN3_TOKENIZER)\n", path.string().c_str());
      std::fflush(stdout);
      std::exit(77);
    }
    auto t = tandem::tokenizer::Tokenizer::load(path);
    if (!t) {
      std::printf("FAIL: %s\n", t.error().message.c_str());
      std::exit(1);
    }
    return std::move(t.value());
  }();
  return tok;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("qwen3 vocabulary: mask agrees with the one-by-one check; cost per step") {
  const auto& tok = qwen3();
  auto t0 = std::chrono::steady_clock::now();
  auto built = TokenVocabulary::build(tok);
  REQUIRE(built.ok());
  auto vocab = *built;
  std::printf("vocabulary: %zu ids, %zu ordinary tokens, trie of %zu nodes, built in %.1f ms\n", vocab->size(),
              vocab->ordinary_tokens(), vocab->nodes().size(), ms_since(t0));

  const json s = {{"type", "object"},
                  {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}},
                                  {"unit", {{"enum", {"celsius", "fahrenheit"}}}}}},
                  {"required", {"city", "unit"}}};
  auto g = *schema_grammar(s);
  const std::int32_t eos = tok.token_to_id("<|endoftext|>").value();
  for (const std::string prefix : {"", "{\"city\": \"Os", "{\"city\": \"Oslo\", ", "{\"days\": 1", "{\"city\":\"x\",\"unit\":\"c"}) {
    for (int budget : {400, 30}) {
      JsonConstraint c(g, vocab, {eos}, budget);
      if (!feed_text(c, prefix, tok)) continue;
      const auto tm = std::chrono::steady_clock::now();
      const auto got = c.allowed_tokens();
      const double mask_ms = ms_since(tm);
      const auto expected = brute_force_allowed(g, *vocab, prefix, budget - c.tokens_taken() - 1, {eos});
      INFO("prefix '" << prefix << "' budget " << budget);
      CHECK(got == expected);
      std::printf("mask after '%s' (budget %d): %zu tokens kept, %.2f ms\n", prefix.c_str(), budget, got.size(), mask_ms);
    }
  }

  // Random logits through a whole document: the average mask cost per step.
  std::mt19937_64 rng(5);
  for (int budget : {30, 96}) {
    JsonConstraint c(g, vocab, {eos}, budget);
    const Generated out = generate_random(c, tok, budget, rng);
    INFO(out.text);
    CHECK(c.finished());
    CHECK(violation(json::parse(out.text), s).empty());
    std::printf("random document, budget %d: %d tokens, mask %.2f ms per step on average\n", budget, out.tokens,
                out.mask_ms / out.tokens);
  }
}
