// Bad templates and runtime failures come back as Error values with the template name, line and
// column of the offending construct, and a message saying what was expected.
#include <doctest/doctest.h>

#include <string>

#include "tandem/template/jinja.hpp"

using tandem::Error;
using tandem::tmpl::ErrorKind;
using tandem::tmpl::kind_of;
using tandem::tmpl::Template;

namespace {

Error parse_error(const std::string& src) {
  auto t = Template::parse(src, "t.jinja");
  REQUIRE_FALSE(t.ok());
  return t.error();
}

Error render_error(const std::string& src, const nlohmann::json& ctx = nlohmann::json::object()) {
  auto t = Template::parse(src, "t.jinja");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.error().text()));
  auto out = t.value().render(ctx);
  REQUIRE_FALSE(out.ok());
  return out.error();
}

}  // namespace

TEST_CASE("syntax errors name the template, line and column") {
  CHECK(parse_error("hello\n{% if x %}\nabc").text() ==
        "t.jinja:2:1: unclosed 'if' block: expected 'endif' before end of template");
  CHECK(parse_error("{% for m in messages %}{% if m %}x{% endfor %}").text() ==
        "t.jinja:1:38: unexpected 'endfor' inside 'if' block: expected 'endif'");
  CHECK(parse_error("{% for m in messages %}\n  {% set a = 1 %}\n").text() ==
        "t.jinja:1:1: unclosed 'for' block: expected 'endfor' before end of template");
  CHECK(parse_error("line one\n  {{ x | nosuch }}").text() == "t.jinja:2:10: unknown filter 'nosuch'");
  CHECK(parse_error("{% endif %}").text() == "t.jinja:1:4: unexpected 'endif': no open block to close");
  CHECK(parse_error("{% if x is frobbed %}{% endif %}").text() == "t.jinja:1:12: unknown test 'frobbed'");
  CHECK(parse_error("ab {{ x ").text() == "t.jinja:1:4: unclosed tag: expected '}}' before end of template");
  CHECK(parse_error("{# never closed").text() == "t.jinja:1:1: unclosed comment: expected '#}'");
  CHECK(parse_error("{{ 'abc }}").text() == "t.jinja:1:4: unterminated string literal");
  CHECK(parse_error("{{ 1 + }}").text() == "t.jinja:1:8: expected an expression, got '}}'");
  CHECK(parse_error("{% frobnicate %}").text() == "t.jinja:1:4: unknown tag 'frobnicate'");
  CHECK(parse_error("{% include 'x.jinja' %}").message == "'include' is not supported (chat templates are self-contained)");
  CHECK(parse_error("{{ a ! b }}").text() == "t.jinja:1:6: unexpected character '!' in tag");
  CHECK(parse_error("{% set x = 1 }}").text() == "t.jinja:1:14: unexpected '}'");
}

TEST_CASE("deep nesting fails cleanly") {
  auto e = parse_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}");
  CHECK(kind_of(e) == ErrorKind::syntax);
  CHECK(e.message == "template nested too deeply");
}

TEST_CASE("raise_exception surfaces the template's message") {
  auto e = render_error("{% for m in messages %}\n{% if m.role not in ['user'] %}\n  {{ raise_exception('Unsupported role: ' ~ m.role) }}\n{% endif %}{% endfor %}",
                        {{"messages", {{{"role", "robot"}}}}});
  CHECK(kind_of(e) == ErrorKind::raised);
  CHECK(e.message == "Unsupported role: robot");
  CHECK(e.where == "t.jinja:3:6");
}

TEST_CASE("runtime errors name what failed and where") {
  CHECK(render_error("{{ 'abc'.nosuch() }}").text() == "t.jinja:1:10: 'str object' has no attribute 'nosuch'");
  CHECK(render_error("x\n{{ missing.attr }}").text() == "t.jinja:2:4: 'missing' is undefined");
  CHECK(render_error("{{ d.a.b }}", {{"d", nlohmann::json::object()}}).text() ==
        "t.jinja:1:6: 'dict object' has no attribute 'a'");
  CHECK(render_error("{{ 'a' + 1 }}").text() == "t.jinja:1:8: unsupported operand type(s) for +: 'str' and 'int'");
  CHECK(render_error("{{ 1 / 0 }}").message == "division by zero");
  CHECK(render_error("{{ 5 // 0 }}").message == "integer division or modulo by zero");
  CHECK(render_error("{{ x | tojson }}").message == "Object of type Undefined is not JSON serializable");
  CHECK(render_error("{% set s = 'x' %}{% set s.attr = 1 %}").message ==
        "cannot assign attribute 'attr' on str object (only namespace() objects accept attribute assignment)");
  CHECK(render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").message ==
        "maximum macro recursion depth exceeded");
  CHECK(render_error("{{ range(100000000) | length }}").message == "range() too large");
  CHECK(render_error("{{ 'x' * 100000000 }}").message == "sequence repetition too large");
  CHECK(render_error("{{ 42() }}").message == "'int object' is not callable");
  CHECK(render_error("{% for a, b in [1] %}{% endfor %}").message == "'int' object is not iterable");
  CHECK(render_error("{{ none | length }}").message == "object of type 'NoneType' has no len()");
}

TEST_CASE("undefined values behave like jinja2's default Undefined") {
  auto t = Template::parse("[{{ x }}|{{ x | default('d') }}|{{ x is defined }}|{{ x == none }}|{% for i in x %}{% endfor %}{{ x | length }}]", "t");
  REQUIRE(t.ok());
  auto out = t.value().render(nlohmann::json::object());
  REQUIRE(out.ok());
  CHECK(out.value() == "[|d|False|False|0]");
}
