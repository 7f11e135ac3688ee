// tokenizer_config.json: which tokens play BOS, EOS, PAD and UNK. Everything else in it (chat
// template, model_max_length) belongs to other layers.
#pragma once
#include <string_view>

#include "impl.hpp"
#include "tandem/result.hpp"

namespace tandem::tokenizer {

// Fills impl.special_ids from the config text; `origin` names the file in errors.
Result<bool> apply_tokenizer_config(Tokenizer::Impl& impl, std::string_view config_json, std::string_view origin);

}  // namespace tandem::tokenizer
