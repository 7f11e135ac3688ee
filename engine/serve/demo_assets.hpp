// Text assets of the demo model: the byte-level BPE tokenizer trained for the tokenizer tests
// (tests/tokenizer/data/small_bpe, embedded at build time) and our GLM-style chat template.
#pragma once
#include <string_view>

namespace tandem::engine::serve {

std::string_view demo_base_tokenizer_json();  // generated from tests/tokenizer/data/small_bpe
std::string_view demo_chat_template();

}  // namespace tandem::engine::serve
