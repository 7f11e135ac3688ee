// SHA-256 as lowercase hex, the one spelling every pin, journal blob, manifest hash and enrolled
// file uses, so digests computed by the controller and by the agent compare as strings.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

// "00ff..." for the bytes given: two lowercase digits per byte.
std::string hex_lower(const unsigned char* bytes, std::size_t n);

// SHA-256 of `bytes` in memory (files are streamed by the agent's sha256_file).
std::string sha256_hex(std::string_view bytes);

}  // namespace tandem
