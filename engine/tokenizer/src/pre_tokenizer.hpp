// Pre-tokenization: cut text into words that BPE merges within (never across). Supported steps are
// the ones byte-level BPE models use: Split (regex or literal, every split behaviour), ByteLevel
// (optional GPT-2 regex, optional prefix space, byte-to-char mapping), Digits, and Sequence.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "regex.hpp"
#include "tandem/result.hpp"

namespace tandem::tokenizer {

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer" value (null: the whole text is one word).
  static Result<PreTokenizer> from_json(const nlohmann::json& spec);

  using WordSink = std::function<void(std::string_view)>;
  // Hands each word of one piece of (normalized, valid UTF-8) text to `sink`, in order. Words
  // stream through the steps instead of being collected: a prompt can be megabytes.
  void apply(std::string_view text, const WordSink& sink) const;

 private:
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  struct Step {
    enum class Kind { Split, ByteLevel } kind = Kind::Split;
    // Split (Digits and ByteLevel's own regex are Splits with a fixed pattern).
    std::vector<Regex> regex;  // zero or one; a vector keeps Step movable without optional<Regex>
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
    // ByteLevel
    bool add_prefix_space = false;
  };

  static Result<std::vector<Step>> parse(const nlohmann::json& spec, const std::string& where);
  void run(std::size_t step, std::string_view text, const WordSink& sink) const;
  void split(std::size_t step, std::string_view text, const WordSink& sink) const;

  std::vector<Step> steps_;
};

}  // namespace tandem::tokenizer
