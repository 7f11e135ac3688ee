#include "tandem/names.hpp"

#include <algorithm>
#include <cstdio>

namespace tandem {
namespace {

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

// One label of 1..63 characters whose inner characters may also be '-'. A loop, not std::regex:
// libstdc++'s regex recurses per character of the input.
template <class IsEdge>
bool is_label(std::string_view s, IsEdge is_edge) {
  if (s.empty() || s.size() > 63) return false;
  if (!is_edge(s.front()) || !is_edge(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return is_edge(c) || c == '-'; });
}

}  // namespace

bool is_dns_label(std::string_view s) { return is_label(s, is_lower_alnum); }

bool is_hostname(std::string_view s) {
  if (!s.empty() && s.back() == '.') s.remove_suffix(1);
  if (s.empty() || s.size() > 253) return false;
  if (std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    if (!is_label(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start), is_alnum))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7F) {
      out += c;  // printable ASCII and UTF-8 sequences pass unchanged
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02X", static_cast<unsigned>(u));
      out += esc;
    }
  }
  return out;
}

}  // namespace tandem
