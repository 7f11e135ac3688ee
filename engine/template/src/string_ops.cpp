#include "string_ops.hpp"

#include <algorithm>
#include <cctype>

#include "error.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tmpl::detail {
namespace {
bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
char up(char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); }
char low(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
bool alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
}  // namespace

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  if (!chars) {
    std::size_t b = 0, e = s.size();
    if (left) while (b < e && py_space(s[b])) ++b;
    if (right) while (e > b && py_space(s[e - 1])) --e;
    return s.substr(b, e - b);
  }
  std::u32string cs = utf8::decode(*chars);
  std::u32string v = utf8::decode(s);
  std::size_t b = 0, e = v.size();
  auto in = [&](char32_t c) { return cs.find(c) != std::u32string::npos; };
  if (left) while (b < e && in(v[b])) ++b;
  if (right) while (e > b && in(v[e - 1])) --e;
  return utf8::encode(std::u32string_view(v).substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, std::int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> out;
  if (sep && sep->empty()) fail("empty separator");
  if (!sep) {
    // Runs of whitespace separate; leading/trailing whitespace yields no empty strings.
    if (!from_right) {
      std::size_t i = 0;
      while (i < s.size()) {
        while (i < s.size() && py_space(s[i])) ++i;
        if (i >= s.size()) break;
        if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
          std::size_t e = s.size();
          while (e > i && py_space(s[e - 1])) --e;
          out.push_back(s.substr(i, e - i));
          break;
        }
        std::size_t j = i;
        while (j < s.size() && !py_space(s[j])) ++j;
        out.push_back(s.substr(i, j - i));
        i = j;
      }
      return out;
    }
    std::size_t e = s.size();
    while (e > 0) {
      while (e > 0 && py_space(s[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::size_t b = 0;
        while (b < e && py_space(s[b])) ++b;
        out.push_back(s.substr(b, e - b));
        break;
      }
      std::size_t b = e;
      while (b > 0 && !py_space(s[b - 1])) --b;
      out.push_back(s.substr(b, e - b));
      e = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (!from_right) {
    std::size_t i = 0;
    for (;;) {
      std::size_t j = s.find(*sep, i);
      if (j == std::string::npos || (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit)) {
        out.push_back(s.substr(i));
        return out;
      }
      out.push_back(s.substr(i, j - i));
      i = j + sep->size();
    }
  }
  std::size_t e = s.size();
  for (;;) {
    std::size_t j = e >= sep->size() ? s.rfind(*sep, e - sep->size()) : std::string::npos;
    if (j == std::string::npos || (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(0, e));
      break;
    }
    out.push_back(s.substr(j + sep->size(), e - j - sep->size()));
    e = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    std::u32string cps = utf8::decode(s);
    for (char32_t c : cps) {
      if (count < 0 || done < count) { out += repl; ++done; }
      utf8::append(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  std::size_t i = 0;
  while (count < 0 || done < count) {
    std::size_t j = s.find(old, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += repl;
    i = j + old.size();
    ++done;
  }
  out.append(s, i, std::string::npos);
  return out;
}

std::string py_case(const std::string& s, const std::string& how) {
  std::string out = s;
  if (how == "upper") {
    for (char& c : out) c = up(c);
  } else if (how == "lower") {
    for (char& c : out) c = low(c);
  } else if (how == "swapcase") {
    for (char& c : out) c = std::isupper(static_cast<unsigned char>(c)) ? low(c) : up(c);
  } else if (how == "capitalize") {
    for (char& c : out) c = low(c);
    if (!out.empty()) out[0] = up(out[0]);
  } else if (how == "title") {
    bool prev_letter = false;
    for (char& c : out) {
      c = prev_letter ? low(c) : up(c);
      prev_letter = alpha(c);
    }
  }
  return out;
}

std::int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<std::int64_t>(utf8::length(s)) + 1;
  std::int64_t n = 0;
  for (std::size_t i = s.find(sub); i != std::string::npos; i = s.find(sub, i + sub.size())) ++n;
  return n;
}

std::int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  std::size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return static_cast<std::int64_t>(utf8::length(std::string_view(s).substr(0, at)));  // code points
}

std::string py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else fail("format(): single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("format(): unmatched '{' in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) fail("format(): format specs are not supported");
    Value v;
    if (field.empty()) {
      v = auto_index < args.args.size() ? args.args[auto_index] : Value();
      ++auto_index;
      if (v.is_undefined()) fail("format(): replacement index out of range");
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      std::size_t k = std::stoul(field);
      if (k >= args.args.size()) fail("format(): replacement index " + field + " out of range");
      v = args.args[k];
    } else {
      v = args.get(static_cast<std::size_t>(-1), field);
      if (!args.has(static_cast<std::size_t>(-1), field)) fail("format(): missing keyword '" + field + "'");
    }
    out += to_str(v);
    i = close;
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = 0, start = 0;
  while (i < s.size()) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = ++i;
    } else {
      ++i;
    }
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

bool py_is(const std::string& s, const std::string& what) {
  if (s.empty()) return false;
  auto all = [&](auto pred) { return std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; }); };
  if (what == "isdigit") return all([](unsigned char c) { return std::isdigit(c); });
  if (what == "isalpha") return all([](unsigned char c) { return std::isalpha(c); });
  if (what == "isalnum") return all([](unsigned char c) { return std::isalnum(c); });
  if (what == "isspace") return all([](unsigned char c) { return std::isspace(c); });
  bool any_cased = std::any_of(s.begin(), s.end(), [](char c) { return alpha(c); });
  if (what == "isupper") return any_cased && !std::any_of(s.begin(), s.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)); });
  if (what == "islower") return any_cased && !std::any_of(s.begin(), s.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
  return false;
}

}  // namespace tandem::tmpl::detail
