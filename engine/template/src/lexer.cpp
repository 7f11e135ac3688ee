#include "lexer.hpp"

#include <algorithm>
#include <cctype>

#include "error.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tmpl::detail {

SourceMap::SourceMap(std::string_view src) {
  line_starts_.push_back(0);
  for (std::size_t i = 0; i < src.size(); ++i)
    if (src[i] == '\n') line_starts_.push_back(i + 1);
}

std::pair<int, int> SourceMap::locate(std::size_t pos) const {
  auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
  auto line = static_cast<std::size_t>(it - line_starts_.begin());
  return {static_cast<int>(line), static_cast<int>(pos - line_starts_[line - 1] + 1)};
}

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::text: return "text";
    case Tok::var_begin: return "'{{'";
    case Tok::var_end: return "'}}'";
    case Tok::block_begin: return "'{%'";
    case Tok::block_end: return "'%}'";
    case Tok::name: return "name";
    case Tok::string: return "string";
    case Tok::integer: return "integer";
    case Tok::floating: return "float";
    case Tok::op: return "operator";
    case Tok::eof: return "end of template";
  }
  return "token";
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string_view src, const Options& o) : s_(src), opt_(o) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      std::size_t open = find_tag(pos_);
      std::string text(s_.substr(pos_, open - pos_));
      bool line_start = pos_ == 0 || s_[pos_ - 1] == '\n';
      if (open == s_.size()) {
        emit_text(std::move(text), pos_);
        pos_ = open;
        break;
      }
      char kind = s_[open + 1];  // '{', '%' or '#'
      char mod = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && opt_.lstrip_blocks && mod != '+') {
        // lstrip_blocks: drop spaces and tabs between the line start and a block or comment tag.
        std::size_t nl = text.rfind('\n');
        std::size_t from = nl == std::string::npos ? 0 : nl + 1;
        if ((nl != std::string::npos || line_start) &&
            text.find_first_not_of(" \t", from) == std::string::npos)
          text.erase(from);
      }
      emit_text(std::move(text), pos_);
      std::size_t body = open + 2 + ((mod == '-' || (mod == '+' && kind != '{')) ? 1 : 0);
      if (kind == '#') {
        lex_comment(open, body);
      } else if (kind == '%' && try_raw(open, body)) {
        // raw block emitted as text
      } else {
        lex_tag(open, body, kind == '{');
      }
    }
    out_.push_back({Tok::eof, "", s_.size()});
    return std::move(out_);
  }

 private:
  std::string_view s_;
  const Options& opt_;
  std::size_t pos_ = 0;
  std::vector<Token> out_;

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  void emit_text(std::string text, std::size_t at) {
    if (!text.empty()) out_.push_back({Tok::text, std::move(text), at});
  }

  // After a closing delimiter: '-' strips all following whitespace; trim_blocks removes one
  // newline after a block or comment tag unless the tag ends with '+'.
  void after_close(std::size_t close_end, char mod, bool block_like) {
    pos_ = close_end;
    if (mod == '-') {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
    } else if (block_like && opt_.trim_blocks && mod != '+' && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
  }

  void lex_comment(std::size_t open, std::size_t body) {
    std::size_t close = s_.find("#}", body);
    if (close == std::string_view::npos) syntax_error("unclosed comment: expected '#}'", open);
    char mod = close > body && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : '\0';
    after_close(close + 2, mod, true);
  }

  std::size_t skip_ws(std::size_t i) const {
    while (i < s_.size() && is_space(s_[i])) ++i;
    return i;
  }

  // Matches "<ws>word<ws>[-+]%}" at i; returns the position after "%}" or npos, and the modifier.
  std::size_t match_word_close(std::size_t i, std::string_view word, char& mod) const {
    i = skip_ws(i);
    if (s_.substr(i, word.size()) != word) return std::string_view::npos;
    i += word.size();
    if (i < s_.size() && is_ident(s_[i])) return std::string_view::npos;
    i = skip_ws(i);
    mod = '\0';
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) mod = s_[i++];
    if (s_.substr(i, 2) != "%}") return std::string_view::npos;
    return i + 2;
  }

  bool try_raw(std::size_t open, std::size_t body) {
    char mod = '\0';
    std::size_t after = match_word_close(body, "raw", mod);
    if (after == std::string_view::npos) return false;
    after_close(after, mod, true);
    std::size_t start = pos_;
    for (std::size_t i = s_.find("{%", start); i != std::string_view::npos; i = s_.find("{%", i + 2)) {
      std::size_t b = i + 2;
      char open_mod = b < s_.size() && (s_[b] == '-' || s_[b] == '+') ? s_[b] : '\0';
      if (open_mod) ++b;
      char end_mod = '\0';
      std::size_t end = match_word_close(b, "endraw", end_mod);
      if (end == std::string_view::npos) continue;
      std::string text(s_.substr(start, i - start));
      if (open_mod == '-')
        while (!text.empty() && is_space(text.back())) text.pop_back();
      emit_text(std::move(text), start);
      after_close(end, end_mod, true);
      return true;
    }
    syntax_error("unclosed 'raw' block: expected '{% endraw %}'", open);
  }

  void lex_tag(std::size_t open, std::size_t body, bool var) {
    out_.push_back({var ? Tok::var_begin : Tok::block_begin, var ? "{{" : "{%", open});
    std::vector<char> brackets;  // a '}}' inside {'a': {'b': 1}} is not the end of the tag
    std::size_t i = body;
    for (;;) {
      i = skip_ws(i);
      if (i >= s_.size())
        syntax_error(std::string("unclosed tag: expected '") + (var ? "}}" : "%}") + "' before end of template", open);
      if (brackets.empty()) {
        char mod = (s_[i] == '-' || s_[i] == '+') ? s_[i] : '\0';
        std::size_t j = i + (mod ? 1 : 0);
        if (s_.substr(j, 2) == (var ? "}}" : "%}")) {
          out_.push_back({var ? Tok::var_end : Tok::block_end, var ? "}}" : "%}", i});
          after_close(j + 2, mod == '+' && var ? '\0' : mod, !var);
          return;
        }
      }
      char c = s_[i];
      if (is_ident_start(c)) {
        std::size_t j = i;
        while (j < s_.size() && is_ident(s_[j])) ++j;
        out_.push_back({Tok::name, std::string(s_.substr(i, j - i)), i});
        i = j;
      } else if (is_digit(c)) {
        i = lex_number(i);
      } else if (c == '\'' || c == '"') {
        i = lex_string(i);
      } else {
        i = lex_operator(i, brackets);
      }
    }
  }

  std::size_t lex_number(std::size_t i) {
    std::size_t j = i;
    auto digits = [&] { while (j < s_.size() && (is_digit(s_[j]) || s_[j] == '_')) ++j; };
    digits();
    bool is_float = false;
    if (j + 1 < s_.size() && s_[j] == '.' && is_digit(s_[j + 1])) {
      is_float = true;
      ++j;
      digits();
    }
    if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      std::size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && is_digit(s_[k])) {
        is_float = true;
        j = k;
        digits();
      }
    }
    std::string text(s_.substr(i, j - i));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    out_.push_back({is_float ? Tok::floating : Tok::integer, std::move(text), i});
    return j;
  }

  // String literals decode Python escapes (\n, \t, \\, \', \", \xNN, \uNNNN, \UNNNNNNNN);
  // an unknown escape keeps its backslash, as Python does.
  std::size_t lex_string(std::size_t i) {
    char q = s_[i];
    std::string out;
    std::size_t j = i + 1;
    auto hex = [&](std::size_t at, int n) -> long {
      if (at + static_cast<std::size_t>(n) > s_.size()) return -1;
      long v = 0;
      for (int k = 0; k < n; ++k) {
        char h = s_[at + static_cast<std::size_t>(k)];
        int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
      }
      return v;
    };
    while (j < s_.size() && s_[j] != q) {
      if (s_[j] != '\\' || j + 1 >= s_.size()) {
        out += s_[j++];
        continue;
      }
      char e = s_[j + 1];
      j += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x': case 'u': case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          long v = hex(j, n);
          if (v < 0 || v > 0x10FFFF) syntax_error("invalid \\" + std::string(1, e) + " escape in string", j - 2);
          utf8::append(out, static_cast<char32_t>(v));
          j += static_cast<std::size_t>(n);
          break;
        }
        default: out += '\\'; out += e; break;
      }
    }
    if (j >= s_.size()) syntax_error("unterminated string literal", i);
    out_.push_back({Tok::string, std::move(out), i});
    return j + 1;
  }

  std::size_t lex_operator(std::size_t i, std::vector<char>& brackets) {
    static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : two) {
      if (s_.substr(i, 2) == op) {
        out_.push_back({Tok::op, op, i});
        return i + 2;
      }
    }
    char c = s_[i];
    static const std::string_view singles = "+-*/%~<>=()[]{},.:|";
    if (singles.find(c) == std::string_view::npos)
      syntax_error(std::string("unexpected character '") + c + "' in tag", i);
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty() || brackets.back() != c) syntax_error(std::string("unexpected '") + c + "'", i);
      brackets.pop_back();
    }
    out_.push_back({Tok::op, std::string(1, c), i});
    return i + 1;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view src, const Options& options) { return Lexer(src, options).run(); }

}  // namespace tandem::tmpl::detail
