// GPT-2's byte-to-unicode table: byte-level BPE vocabularies spell every byte as a printable
// character (space is "Ġ", newline "Ċ"), so a token string never holds raw control bytes.
#pragma once
#include <array>
#include <string>
#include <string_view>

namespace tandem::tokenizer::byte_level {

// UTF-8 spelling of the character that stands for each byte.
const std::array<std::string, 256>& byte_to_char();

// Maps every byte of `raw` to its character, appending to `out`.
void encode(std::string_view raw, std::string& out);

// The bytes a token string stands for. Like the HF ByteLevel decoder: a token with a character
// outside the table (an added token such as "<|im_start|>" is inside it; "ü" typed as an added
// token is not) is taken as its own UTF-8 bytes.
std::string decode_token(std::string_view token);

}  // namespace tandem::tokenizer::byte_level
