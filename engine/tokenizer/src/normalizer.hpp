// Unicode normalization forms via ICU (Qwen and GLM tokenizers ask for NFC). Only the normalizers
// that byte-level BPE models use are supported; anything else is refused at load time.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tandem/result.hpp"

namespace tandem::tokenizer {

class Normalizer {
 public:
  // `spec` is tokenizer.json's "normalizer" value (null: no normalization).
  static Result<Normalizer> from_json(const nlohmann::json& spec);

  bool empty() const { return steps_.empty(); }
  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  enum class Form { NFC, NFD, NFKC, NFKD };
  static Result<std::vector<Form>> parse(const nlohmann::json& spec, const std::string& where);
  std::vector<Form> steps_;
};

}  // namespace tandem::tokenizer
