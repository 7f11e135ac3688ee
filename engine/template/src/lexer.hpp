// Lexer: splits template source into text and tag tokens, applying whitespace control
// ({%- -%}, {%+ +%}, and the trim_blocks / lstrip_blocks options) so the parser never sees it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/template/jinja.hpp"

namespace tandem::tmpl::detail {

enum class Tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct Token {
  Tok kind;
  std::string text;  // text content, identifier, decoded string literal, number digits, operator
  std::size_t pos;   // byte offset of the token in the source
};

// Maps byte offsets to 1-based line and column for error messages.
class SourceMap {
 public:
  explicit SourceMap(std::string_view src);
  std::pair<int, int> locate(std::size_t pos) const;

 private:
  std::vector<std::size_t> line_starts_;
};

// Throws TemplateError (syntax) on an unclosed tag, comment or string, or an unexpected character.
std::vector<Token> lex(std::string_view src, const Options& options);

const char* tok_name(Tok t);

}  // namespace tandem::tmpl::detail
