// A malformed tokenizer.json is refused with a message naming the file, the key and what was
// expected, never a crash or a silently wrong tokenizer.
#include <doctest/doctest.h>

#include <string>

#include "golden.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

using tandem::tokenizer::Tokenizer;

namespace {

// A minimal valid byte-level BPE file with one piece replaced by `model` / `extra` text.
std::string json_with(const std::string& model, const std::string& extra = "") {
  return R"({"added_tokens": [], "normalizer": null,
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
             "decoder": {"type": "ByteLevel"}, "model": )" + model + extra + "}";
}

std::string load_error(const std::string& json, const std::string& config = "") {
  auto tok = Tokenizer::from_json(json, config, "test/tokenizer.json");
  REQUIRE_FALSE(tok.ok());
  return tok.error().message;
}

bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

const std::string kGoodModel = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

}  // namespace

TEST_CASE("the minimal file loads and merges") {
  auto tok = Tokenizer::from_json(json_with(kGoodModel));
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  CHECK(tok->encode("abab", false) == std::vector<int32_t>{2, 2});
  CHECK(tok->encode("ba", false) == std::vector<int32_t>{1, 0});
}

TEST_CASE("merges in list form load like the string form") {
  auto tok = Tokenizer::from_json(json_with(R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]})"));
  REQUIRE(tok.ok());
  CHECK(tok->encode("ab", false) == std::vector<int32_t>{2});
}

TEST_CASE("missing model.vocab is named") {
  const auto msg = load_error(json_with(R"({"type": "BPE", "merges": []})"));
  CHECK(contains(msg, "test/tokenizer.json"));
  CHECK(contains(msg, "model.vocab"));
  CHECK(contains(msg, "expected"));
}

TEST_CASE("an unknown model type is refused clearly") {
  const auto msg = load_error(json_with(R"({"type": "Unigram", "vocab": [["a", 0.0]]})"));
  CHECK(contains(msg, "model.type"));
  CHECK(contains(msg, "Unigram"));
  CHECK(contains(msg, "not supported"));
}

TEST_CASE("other malformed inputs") {
  CHECK(contains(load_error("{not json"), "not valid JSON"));
  CHECK(contains(load_error(R"({"added_tokens": []})"), "model: missing"));
  CHECK(contains(load_error(json_with(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]})")), "model.merges[0]"));
  CHECK(contains(load_error(json_with(R"({"type": "BPE", "vocab": {"a": "zero"}, "merges": []})")), "model.vocab[\"a\"]"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "normalizer": {"type": "Lowercase"})")), "Lowercase"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}})")),
                 "pre_tokenizer.pattern"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "pre_tokenizer": {"type": "Metaspace"})")), "Metaspace"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "added_tokens": [{"content": "<x>"}])")), "added_tokens[0]"));
  CHECK(contains(load_error(json_with(kGoodModel), R"({"eos_token": "<nope>"})"), "eos_token"));
}

TEST_CASE("a missing file is named") {
  auto tok = Tokenizer::load("/nonexistent/dir/tokenizer.json");
  REQUIRE_FALSE(tok.ok());
  CHECK(contains(tok.error().message, "/nonexistent/dir/tokenizer.json"));
}

// Found by fuzzing: a post-processor id outside the vocabulary was written into every encoding,
// and one huge id made the id -> token table ask for gigabytes.
TEST_CASE("ids outside the vocabulary are refused at load, not handed out") {
  const std::string post = R"(, "post_processor": {"type": "TemplateProcessing", "single": [
      {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [999], "tokens": ["<s>"]}}})";
  auto msg = load_error(json_with(kGoodModel, post));
  CHECK(contains(msg, "post_processor"));
  CHECK(contains(msg, "999"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", -1], "sep": ["[SEP]", 1]})")),
                 "-1"));
  CHECK(contains(load_error(json_with(R"({"type": "BPE", "vocab": {"a": 2000000000}, "merges": []})")), "model.vocab[\"a\"]"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "added_tokens": [{"id": 3000000000, "content": "<x>"}])")),
                 "added_tokens[0]"));
  // An in-range post-processor id still loads and is emitted.
  const std::string ok_post = R"(, "post_processor": {"type": "TemplateProcessing", "single": [
      {"SpecialToken": {"id": "ab", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"ab": {"id": "ab", "ids": [2], "tokens": ["ab"]}}})";
  auto tok = Tokenizer::from_json(json_with(kGoodModel, ok_post));
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  CHECK(tok->encode("b", true) == std::vector<int32_t>{2, 1});
}

// Found by the hour-long fuzz run: an optional field of the wrong type ("type": 7) made
// nlohmann's value() throw out of from_json; now each is an error naming the key.
TEST_CASE("optional fields of the wrong type are refused by name, not thrown") {
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "decoder": {"type": 7})")), "decoder.type"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "decoder": [1])")), "decoder"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "added_tokens": [{"id": 2, "content": "ab", "special": 1}])")),
                 "added_tokens[0].special"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "added_tokens": [{"id": 2, "content": "ab", "lstrip": "no"}])")),
                 "added_tokens[0].lstrip"));
  CHECK(contains(load_error(json_with(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": "yes"})")),
                 "model.byte_fallback"));
  CHECK(contains(load_error(json_with(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": 0})")),
                 "model.unk_token"));
  CHECK(contains(load_error(json_with(kGoodModel, R"(, "pre_tokenizer": {"type": "ByteLevel", "use_regex": 1})")),
                 "pre_tokenizer.use_regex"));
  CHECK_MESSAGE(contains(load_error(json_with(kGoodModel, R"(, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": 3})")),
                 "pre_tokenizer.behavior"), load_error(json_with(kGoodModel, R"(, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": 3})")));
}

// A Split whose pattern is {"String": ...} (a literal) used to fail to compile: PCRE2_LITERAL
// refuses the UCP option that regex patterns get.
TEST_CASE("a Split on a literal string loads and splits") {
  const std::string split = R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"String": "b"}, "behavior": "Isolated"},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  auto tok = Tokenizer::from_json(json_with(kGoodModel, split));
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().message));
  // "ab" alone merges to id 2; split before the literal "b" it stays two pieces.
  CHECK(tok->encode("ab", false) == std::vector<int32_t>{0, 1});
}
