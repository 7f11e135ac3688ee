#include "byte_level.hpp"

#include <optional>

#include "tandem/utf8.hpp"

namespace tandem::tokenizer::byte_level {
namespace {

// Bytes that are printable Latin-1 keep their own code point; the other 68 take U+0100 upwards
// in byte order. This is the fixed table every GPT-2 descended vocabulary is built on.
std::array<char32_t, 256> make_code_points() {
  std::array<char32_t, 256> cps{};
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cps[b] = printable ? b : next++;
  }
  return cps;
}

const std::array<char32_t, 256>& code_points() {
  static const std::array<char32_t, 256> cps = make_code_points();
  return cps;
}

// Inverse table over the code point range the mapping uses (all below U+0144).
std::optional<unsigned char> char_to_byte(char32_t cp) {
  static const auto inverse = [] {
    std::array<int, 0x144> inv{};
    inv.fill(-1);
    const auto& cps = code_points();
    for (unsigned b = 0; b < 256; ++b) inv[cps[b]] = static_cast<int>(b);
    return inv;
  }();
  if (cp >= inverse.size() || inverse[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(inverse[cp]);
}

}  // namespace

const std::array<std::string, 256>& byte_to_char() {
  static const auto table = [] {
    std::array<std::string, 256> t;
    const auto& cps = code_points();
    for (unsigned b = 0; b < 256; ++b) utf8::append(t[b], cps[b]);
    return t;
  }();
  return table;
}

void encode(std::string_view raw, std::string& out) {
  const auto& table = byte_to_char();
  for (const char c : raw) out.append(table[static_cast<unsigned char>(c)]);
}

std::string decode_token(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  for (std::size_t pos = 0; pos < token.size();) {
    const utf8::Step st = utf8::step(token, pos);
    const auto b = st.kind == utf8::StepKind::Valid ? char_to_byte(st.code_point) : std::nullopt;
    if (!b) return std::string(token);
    bytes.push_back(static_cast<char>(*b));
    pos += st.length;
  }
  return bytes;
}

}  // namespace tandem::tokenizer::byte_level
