#include "tandem/utf8.hpp"

namespace tandem::utf8 {
namespace {

// Allowed range of the second byte depends on the lead byte (no overlongs, no surrogates, <= U+10FFFF).
struct Lead {
  std::size_t continuation;  // 0 = not a lead byte
  unsigned char second_lo;
  unsigned char second_hi;
  char32_t bits;
};

Lead classify(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF, b & 0x1Fu};
  if (b == 0xE0) return {2, 0xA0, 0xBF, b & 0x0Fu};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {2, 0x80, 0xBF, b & 0x0Fu};
  if (b == 0xED) return {2, 0x80, 0x9F, b & 0x0Fu};
  if (b == 0xF0) return {3, 0x90, 0xBF, b & 0x07u};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF, b & 0x07u};
  if (b == 0xF4) return {3, 0x80, 0x8F, b & 0x07u};
  return {0, 0, 0, 0};
}

}  // namespace

Step step(std::string_view s, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {StepKind::Valid, 1, b0};
  const Lead lead = classify(b0);
  if (lead.continuation == 0) return {StepKind::Invalid, 1, 0};
  char32_t cp = lead.bits;
  for (std::size_t i = 1; i <= lead.continuation; ++i) {
    if (pos + i >= s.size()) return {StepKind::Truncated, i, 0};
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? lead.second_lo : 0x80;
    const unsigned char hi = i == 1 ? lead.second_hi : 0xBF;
    if (b < lo || b > hi) return {StepKind::Invalid, i, 0};
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {StepKind::Valid, lead.continuation + 1, cp};
}

std::string to_valid_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) {
    const Step st = step(s, pos);
    if (st.kind == StepKind::Valid) {
      out.append(s.substr(pos, st.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += st.length;
  }
  return out;
}

std::size_t truncated_tail(std::string_view s) {
  // A forward scan, not a look at the last bytes: only the scan's own step boundaries tell a
  // held-back prefix from bytes that one-shot decoding would already have replaced.
  std::size_t pos = 0;
  std::size_t last = 0;
  StepKind last_kind = StepKind::Valid;
  while (pos < s.size()) {
    const Step st = step(s, pos);
    last = st.length;
    last_kind = st.kind;
    pos += st.length;
  }
  return last_kind == StepKind::Truncated ? last : 0;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) {
    const Step st = step(s, pos);
    out.push_back(st.kind == StepKind::Valid ? st.code_point : U'\uFFFD');
    pos += st.length;
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append(out, c);
  return out;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::size_t invalid_at(std::string_view s) {
  for (std::size_t pos = 0; pos < s.size();) {
    const Step st = step(s, pos);
    if (st.kind != StepKind::Valid) return pos;
    pos += st.length;
  }
  return std::string_view::npos;
}

std::size_t boundary_before(std::string_view s, std::size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

std::string clip(std::string_view s, std::size_t n) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, boundary_before(s, n))) + "...";
}

}  // namespace tandem::utf8
