// Public entry points: parse and render, turning internal failures into Error values.
#include "tandem/template/jinja.hpp"

#include <new>
#include <tuple>

#include "ast.hpp"
#include "error.hpp"
#include "evaluator.hpp"
#include "lexer.hpp"
#include "parser.hpp"

namespace tandem::tmpl {

Error template_error(ErrorKind kind, const std::string& name, std::string message, int line, int column) {
  std::string where = name.empty() ? "<template>" : name;
  if (line > 0) where += ":" + std::to_string(line) + ":" + std::to_string(column);
  Error err{std::move(message), std::move(where)};
  err.code = static_cast<int>(kind);
  return err;
}

namespace {

Error to_error(const detail::TemplateError& e, const std::string& name, std::string_view source) {
  int line = 0, col = 0;
  if (e.pos() != detail::kNoPos) std::tie(line, col) = detail::SourceMap(source).locate(std::min(e.pos(), source.size()));
  return template_error(e.kind(), name, e.message(), line, col);
}

Error plain_error(ErrorKind kind, const std::string& name, std::string message) {
  return template_error(kind, name, std::move(message), 0, 0);
}

template <class J>
Result<std::string> render_impl(const std::shared_ptr<const detail::Program>& program, const J& context) {
  if (!program) return plain_error(ErrorKind::runtime, "", "render() on an empty Template");
  if (!context.is_object() && !context.is_null())
    return plain_error(ErrorKind::runtime, program->name, "the render context must be a JSON object");
  try {
    detail::Evaluator ev(*program, detail::from_json(context));
    return ev.run();
  } catch (const detail::TemplateError& e) {
    return to_error(e, program->name, program->source);
  } catch (const std::bad_alloc&) {
    return plain_error(ErrorKind::runtime, program->name, "out of memory while rendering");
  } catch (const std::exception& e) {
    return plain_error(ErrorKind::runtime, program->name, std::string("internal error: ") + e.what());
  }
}

}  // namespace

Result<Template> Template::parse(std::string_view source, std::string name, Options options) {
  auto program = std::make_shared<detail::Program>();
  program->name = std::move(name);
  program->source = std::string(source);
  program->options = options;
  try {
    program->body = detail::parse(detail::lex(program->source, program->options));
  } catch (const detail::TemplateError& e) {
    return to_error(e, program->name, program->source);
  } catch (const std::exception& e) {
    return plain_error(ErrorKind::syntax, program->name, std::string("internal error: ") + e.what());
  }
  Template t;
  t.program_ = std::move(program);
  return t;
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const { return render_impl(program_, context); }
Result<std::string> Template::render(const nlohmann::json& context) const { return render_impl(program_, context); }

const std::string& Template::name() const {
  static const std::string empty;
  return program_ ? program_->name : empty;
}

}  // namespace tandem::tmpl
