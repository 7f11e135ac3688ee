// Text assets of the demo model: the small byte-level BPE tokenizer (the tokenizer tests use it too)
// (engine/serve/assets/demo_tokenizer, embedded at build time) and our GLM-style chat template.
#pragma once
#include <string_view>

namespace tandem::engine::serve {

std::string_view demo_base_tokenizer_json();  // generated from engine/serve/assets/demo_tokenizer
std::string_view demo_chat_template();

}  // namespace tandem::engine::serve
