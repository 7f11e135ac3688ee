// The post-processor's only effect on a single sequence's ids: tokens placed before and after it
// when add_special_tokens is on (Llama 3's BOS, RoBERTa's <s> ... </s>). ByteLevel only trims
// offsets, so for Qwen and GLM both lists are empty.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tandem/result.hpp"

namespace tandem::tokenizer {

struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;

  // `spec` is tokenizer.json's "post_processor" value.
  static Result<PostProcessor> from_json(const nlohmann::json& spec, const std::string& where = "post_processor");
};

}  // namespace tandem::tokenizer
