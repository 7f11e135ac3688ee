// Parser: tokens -> tree. Recursive descent following jinja2's grammar and operator precedence
// (ternary < or < and < not < comparison < + - < ~ < * / // % < ** < unary < postfix/filters).
#pragma once

#include <vector>

#include "ast.hpp"
#include "lexer.hpp"

namespace tandem::tmpl::detail {

// Throws TemplateError (syntax) with the offending token's position.
Body parse(const std::vector<Token>& tokens);

}  // namespace tandem::tmpl::detail
