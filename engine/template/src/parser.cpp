#include "parser.hpp"

#include <algorithm>
#include <charconv>
#include <initializer_list>

#include "error.hpp"
#include "filters.hpp"

namespace tandem::tmpl::detail {
namespace {

constexpr int kMaxDepth = 200;  // nesting limit: deep input must fail cleanly, not overflow the stack

ExprPtr make(Expr::Kind k, std::size_t pos) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  const std::vector<Token>& t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  std::vector<std::pair<std::string, std::string>> open_;  // (block, its end tag), innermost last

  struct DepthGuard {
    int& d;
    DepthGuard(int& depth, std::size_t pos) : d(depth) {
      if (++d > kMaxDepth) syntax_error("template nested too deeply", pos);
    }
    ~DepthGuard() { --d; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() { if (i_ + 1 < t_.size()) ++i_; }
  bool is_op(std::string_view op) const { return cur().kind == Tok::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == Tok::name && cur().text == n; }
  bool skip_op(std::string_view op) { if (is_op(op)) { advance(); return true; } return false; }
  bool skip_name(std::string_view n) { if (is_name(n)) { advance(); return true; } return false; }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::name: return "'" + t.text + "'";
      case Tok::op: return "'" + t.text + "'";
      case Tok::string: return "string literal";
      case Tok::integer: case Tok::floating: return "number " + t.text;
      default: return tok_name(t.kind);
    }
  }
  [[noreturn]] void expected(const std::string& what) const {
    syntax_error("expected " + what + ", got " + describe(cur()), cur().pos);
  }
  void expect_op(std::string_view op) { if (!skip_op(op)) expected("'" + std::string(op) + "'"); }
  std::string expect_name() {
    if (cur().kind != Tok::name) expected("a name");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != Tok::block_end) expected("'%}'");
    advance();
  }

  // ---- statements -------------------------------------------------------------------------

  // Parses until a {% tag %} whose name is in `ends` (left unconsumed after the name; `end` gets it)
  // or the end of the template (only allowed when `ends` is empty).
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    Body body;
    for (;;) {
      const Token& tok = cur();
      if (tok.kind == Tok::eof) {
        end.clear();
        return body;
      }
      if (tok.kind == Tok::text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::text;
        n->pos = tok.pos;
        n->text = tok.text;
        body.push_back(std::move(n));
        advance();
      } else if (tok.kind == Tok::var_begin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::output;
        n->pos = tok.pos;
        advance();
        n->expr = parse_tuple(true);
        if (cur().kind != Tok::var_end) expected("'}}'");
        advance();
        body.push_back(std::move(n));
      } else if (tok.kind == Tok::block_begin) {
        const Token& name = peek();
        if (name.kind == Tok::name && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          end = name.text;
          advance();
          advance();
          return body;
        }
        advance();
        body.push_back(parse_statement(tok.pos));
      } else {
        expected("text or a tag");
      }
    }
  }

  // Parses a block body that must end with one of `ends`; reports the opening tag if it does not.
  Body parse_block(std::initializer_list<std::string_view> ends, std::string& end,
                   const std::string& what, std::size_t open_pos) {
    open_.emplace_back(what, std::string(*(ends.end() - 1)));
    Body body = parse_body(ends, end);
    open_.pop_back();
    if (end.empty())
      syntax_error("unclosed '" + what + "' block: expected '" + std::string(*(ends.end() - 1)) +
                   "' before end of template", open_pos);
    return body;
  }

  NodePtr node(Node::Kind k, std::size_t pos) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->pos = pos;
    return n;
  }

  // long-function: one branch per statement keyword (if, for, set, macro, ...), each short; together
  // they are the statement grammar, read top to bottom.
  NodePtr parse_statement(std::size_t pos) {
    DepthGuard guard(depth_, pos);
    if (cur().kind != Tok::name) expected("a statement name");
    std::string kw = cur().text;
    std::size_t kw_pos = cur().pos;
    advance();
    std::string end;
    if (kw == "if") {
      auto n = node(Node::Kind::if_, pos);
      ExprPtr test = parse_expression();
      expect_block_end();
      for (;;) {
        Body body = parse_block({"elif", "else", "endif"}, end, "if", pos);
        n->branches.emplace_back(std::move(test), std::move(body));
        if (end == "elif") {
          test = parse_expression();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          n->else_body = parse_block({"endif"}, end, "if", pos);
        }
        expect_block_end();
        return n;
      }
    }
    if (kw == "for") {
      auto n = node(Node::Kind::for_, pos);
      n->target = parse_target();
      if (!skip_name("in")) expected("'in'");
      n->expr = parse_tuple(false);
      if (skip_name("if")) n->test = parse_expression();
      if (is_name("recursive")) syntax_error("recursive for loops are not supported", cur().pos);
      expect_block_end();
      n->body = parse_block({"else", "endfor"}, end, "for", pos);
      if (end == "else") {
        expect_block_end();
        n->else_body = parse_block({"endfor"}, end, "for", pos);
      }
      expect_block_end();
      return n;
    }
    if (kw == "set") {
      ExprPtr target = parse_target();
      if (skip_op("=")) {
        auto n = node(Node::Kind::set, pos);
        n->target = std::move(target);
        n->expr = parse_tuple(true);
        expect_block_end();
        return n;
      }
      auto n = node(Node::Kind::set_block, pos);
      if (target->kind != Expr::Kind::name) syntax_error("a block set assigns a single name", target->pos);
      n->target = std::move(target);
      if (is_op("|")) n->filters = parse_filters(nullptr);
      expect_block_end();
      n->body = parse_block({"endset"}, end, "set", pos);
      expect_block_end();
      return n;
    }
    if (kw == "macro") {
      auto n = node(Node::Kind::macro, pos);
      n->text = expect_name();
      n->params = parse_params();
      expect_block_end();
      n->body = parse_block({"endmacro"}, end, "macro", pos);
      if (cur().kind == Tok::name) advance();  // {% endmacro name %}
      expect_block_end();
      return n;
    }
    if (kw == "call") {
      auto n = node(Node::Kind::call_block, pos);
      if (is_op("(")) n->params = parse_params();
      n->expr = parse_expression();
      if (n->expr->kind != Expr::Kind::call) syntax_error("expected a macro call after 'call'", n->expr->pos);
      expect_block_end();
      n->body = parse_block({"endcall"}, end, "call", pos);
      expect_block_end();
      return n;
    }
    if (kw == "filter") {
      auto n = node(Node::Kind::filter_block, pos);
      n->filters = parse_filter_chain(nullptr);
      expect_block_end();
      n->body = parse_block({"endfilter"}, end, "filter", pos);
      expect_block_end();
      return n;
    }
    if (kw == "break" || kw == "continue") {
      expect_block_end();
      return node(kw == "break" ? Node::Kind::break_ : Node::Kind::continue_, pos);
    }
    if (kw == "generation" || kw == "block") {
      // {% generation %} marks assistant text for transformers' mask; {% block %} outside
      // inheritance renders in place. Both just render their body here.
      auto n = node(Node::Kind::scope, pos);
      if (kw == "block") expect_name();
      expect_block_end();
      n->body = parse_block({kw == "block" ? "endblock" : "endgeneration"}, end, kw, pos);
      if (cur().kind == Tok::name) advance();
      expect_block_end();
      return n;
    }
    if (kw == "do") {
      auto n = node(Node::Kind::do_, pos);
      n->expr = parse_tuple(true);
      expect_block_end();
      return n;
    }
    if (kw == "extends" || kw == "include" || kw == "import" || kw == "from")
      syntax_error("'" + kw + "' is not supported (chat templates are self-contained)", kw_pos);
    if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") {
      if (open_.empty()) syntax_error("unexpected '" + kw + "': no open block to close", kw_pos);
      syntax_error("unexpected '" + kw + "' inside '" + open_.back().first + "' block: expected '" +
                   open_.back().second + "'", kw_pos);
    }
    syntax_error("unknown tag '" + kw + "'", kw_pos);
  }

  // for/set targets: a name, `a, b`, `(a, b)`, or `ns.attr` (set only).
  ExprPtr parse_target() {
    std::size_t pos = cur().pos;
    auto one = [&]() -> ExprPtr {
      if (skip_op("(")) {
        ExprPtr inner = parse_target();
        expect_op(")");
        return inner;
      }
      auto e = make(Expr::Kind::name, cur().pos);
      e->name = expect_name();
      if (is_op(".")) {
        advance();
        auto a = make(Expr::Kind::getattr, cur().pos);
        a->name = expect_name();
        a->children.push_back(std::move(e));
        return a;
      }
      return e;
    };
    ExprPtr first = one();
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::tuple, pos);
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_name("in") || is_op("=") || cur().kind == Tok::block_end) break;
      tuple->children.push_back(one());
    }
    return tuple;
  }

  std::vector<Param> parse_params() {
    std::vector<Param> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression();
      params.push_back(std::move(p));
    }
    advance();
    return params;
  }

  // ---- expressions ------------------------------------------------------------------------

  // `a, b` without brackets is a tuple in {{ }}, for iterables and set values. A for loop's
  // iterable takes no inline if (jinja2's with_condexpr=False): `for x in xs if x` filters.
  ExprPtr parse_tuple(bool allow_cond) {
    std::size_t pos = cur().pos;
    auto item = [&] { return allow_cond ? parse_expression() : parse_or(); };
    ExprPtr first = item();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::tuple, pos);
    t->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == Tok::block_end || cur().kind == Tok::var_end || is_name("if")) break;
      t->children.push_back(item());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(depth_, cur().pos);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      std::size_t pos = cur().pos;
      advance();
      auto c = make(Expr::Kind::cond, pos);
      c->children.push_back(std::move(e));
      c->children.push_back(parse_or());
      c->children.push_back(skip_name("else") ? parse_expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, std::size_t pos, ExprPtr l, ExprPtr r) {
    auto b = make(Expr::Kind::binary, pos);
    b->name = std::move(op);
    b->children.push_back(std::move(l));
    b->children.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      std::size_t pos = cur().pos;
      advance();
      e = binary("or", pos, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      std::size_t pos = cur().pos;
      advance();
      e = binary("and", pos, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(depth_, cur().pos);
      auto u = make(Expr::Kind::unary, cur().pos);
      advance();
      u->name = "not";
      u->children.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }

  // Chained comparisons (a < b < c) become (a < b) and (b < c); b is evaluated twice, which is
  // harmless for the side-effect-free expressions templates compare.
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    ExprPtr result;
    const Expr* last_rhs = nullptr;
    for (;;) {
      std::size_t pos = cur().pos;
      std::string op;
      if (cur().kind == Tok::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == Tok::name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      ExprPtr rhs = parse_math1();
      const Expr* rhs_ptr = rhs.get();
      if (result) {
        // a < b < c is (a < b) and (b < c); b is evaluated twice, harmless for the
        // side-effect-free expressions templates compare.
        result = binary("and", pos, std::move(result), binary(op, pos, clone(*last_rhs), std::move(rhs)));
      } else {
        result = binary(op, pos, std::move(e), std::move(rhs));
      }
      last_rhs = rhs_ptr;
    }
    return result ? std::move(result) : std::move(e);
  }

  static ExprPtr clone(const Expr& e) {
    auto c = std::make_unique<Expr>();
    c->kind = e.kind;
    c->pos = e.pos;
    c->name = e.name;
    c->value = e.value;
    c->negated = e.negated;
    for (const auto& ch : e.children) c->children.push_back(ch ? clone(*ch) : nullptr);
    for (const auto& a : e.args) c->args.push_back(clone(*a));
    for (const auto& [k, v] : e.kwargs) c->kwargs.emplace_back(k, clone(*v));
    return c;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      std::size_t pos = cur().pos;
      advance();
      e = binary(op, pos, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      std::size_t pos = cur().pos;
      advance();
      e = binary("~", pos, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      std::size_t pos = cur().pos;
      advance();
      e = binary(op, pos, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      std::size_t pos = cur().pos;
      advance();
      e = binary("**", pos, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filters) {
    DepthGuard guard(depth_, cur().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::unary, cur().pos);
      e->name = cur().text;
      advance();
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filters) e = parse_filter_expr(std::move(e));
    return e;
  }

  // long-function: one case per kind of token that can start an expression.
  ExprPtr parse_primary() {
    const Token& tok = cur();
    std::size_t pos = tok.pos;
    switch (tok.kind) {
      case Tok::name: {
        auto e = make(Expr::Kind::literal, pos);
        const std::string& n = tok.text;
        if (n == "true" || n == "True") e->value = true;
        else if (n == "false" || n == "False") e->value = false;
        else if (n == "none" || n == "None") e->value = None{};
        else {
          e->kind = Expr::Kind::name;
          e->name = n;
        }
        advance();
        return e;
      }
      case Tok::string: {
        auto e = make(Expr::Kind::literal, pos);
        std::string s;
        while (cur().kind == Tok::string) {  // adjacent literals concatenate, as in Python
          s += cur().text;
          advance();
        }
        e->value = std::move(s);
        return e;
      }
      case Tok::integer: {
        auto e = make(Expr::Kind::literal, pos);
        std::int64_t v = 0;
        auto r = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        if (r.ec != std::errc{}) syntax_error("integer literal out of range", pos);
        e->value = v;
        advance();
        return e;
      }
      case Tok::floating: {
        auto e = make(Expr::Kind::literal, pos);
        double v = 0;
        std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), v);
        e->value = v;
        advance();
        return e;
      }
      case Tok::op: {
        if (tok.text == "(") {
          advance();
          if (skip_op(")")) return make(Expr::Kind::tuple, pos);
          ExprPtr first = parse_expression();
          if (skip_op(")")) return first;
          auto t = make(Expr::Kind::tuple, pos);
          t->children.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            t->children.push_back(parse_expression());
          }
          expect_op(")");
          return t;
        }
        if (tok.text == "[") {
          advance();
          auto l = make(Expr::Kind::list, pos);
          while (!is_op("]")) {
            if (!l->children.empty()) expect_op(",");
            if (is_op("]")) break;
            l->children.push_back(parse_expression());
          }
          advance();
          return l;
        }
        if (tok.text == "{") {
          advance();
          auto d = make(Expr::Kind::dict, pos);
          while (!is_op("}")) {
            if (!d->children.empty()) expect_op(",");
            if (is_op("}")) break;
            d->children.push_back(parse_expression());
            expect_op(":");
            d->children.push_back(parse_expression());
          }
          advance();
          return d;
        }
        break;
      }
      default: break;
    }
    expected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      std::size_t pos = cur().pos;
      if (is_op(".")) {
        advance();
        auto a = make(Expr::Kind::getattr, cur().pos);  // errors point at the attribute name
        if (cur().kind == Tok::name) {
          a->name = cur().text;
          advance();
        } else if (cur().kind == Tok::integer) {  // x.0 is x[0]
          a->kind = Expr::Kind::getitem;
          auto idx = make(Expr::Kind::literal, cur().pos);
          std::int64_t v = 0;
          std::from_chars(cur().text.data(), cur().text.data() + cur().text.size(), v);
          idx->value = v;
          a->children.push_back(std::move(e));
          a->children.push_back(std::move(idx));
          advance();
          e = std::move(a);
          continue;
        } else {
          expected("an attribute name after '.'");
        }
        a->children.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        advance();
        auto g = make(Expr::Kind::getitem, pos);
        g->children.push_back(std::move(e));
        g->children.push_back(parse_subscript());
        expect_op("]");
        e = std::move(g);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript() {
    std::size_t pos = cur().pos;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression();
      if (!is_op(":")) return start;
    }
    auto s = make(Expr::Kind::slice, pos);
    s->children.push_back(std::move(start));
    advance();  // ':'
    s->children.push_back(is_op(":") || is_op("]") ? nullptr : parse_expression());
    if (skip_op(":")) s->children.push_back(is_op("]") ? nullptr : parse_expression());
    else s->children.push_back(nullptr);
    return s;
  }

  void parse_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (cur().kind == Tok::name && peek().kind == Tok::op && peek().text == "=") {
        std::string k = cur().text;
        advance();
        advance();
        call.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!call.kwargs.empty()) expected("a keyword argument (positional after keyword)");
        call.args.push_back(parse_expression());
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = make(Expr::Kind::call, callee->pos);  // errors point at what is called
    c->children.push_back(std::move(callee));
    parse_args(*c);
    return c;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        e = parse_filters(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // One or more `| name(args)` applied to `e` (null for {% filter %} / block set).
  ExprPtr parse_filters(ExprPtr e) {
    while (skip_op("|")) e = parse_one_filter(std::move(e));
    return e;
  }
  ExprPtr parse_filter_chain(ExprPtr e) {
    e = parse_one_filter(std::move(e));
    return parse_filters(std::move(e));
  }
  ExprPtr parse_one_filter(ExprPtr e) {
    auto f = make(Expr::Kind::filter, cur().pos);
    f->name = expect_name();
    if (!is_filter(f->name)) syntax_error("unknown filter '" + f->name + "'", f->pos);
    f->children.push_back(std::move(e));
    if (is_op("(")) parse_args(*f);
    return f;
  }

  ExprPtr parse_test(ExprPtr e) {
    auto t = make(Expr::Kind::test, cur().pos);
    advance();  // 'is'
    t->negated = skip_name("not");
    std::size_t name_pos = cur().pos;
    t->name = expect_name();
    if (!is_test(t->name)) syntax_error("unknown test '" + t->name + "'", name_pos);
    t->children.push_back(std::move(e));
    if (is_op("(")) {
      parse_args(*t);
    } else if ((cur().kind == Tok::name || cur().kind == Tok::string || cur().kind == Tok::integer ||
                cur().kind == Tok::floating || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
               !is_name("is") && !is_name("in") && !is_name("not")) {
      // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses
      t->args.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace tandem::tmpl::detail
