// Public entry points: parse and render, turning internal failures into Error values.
#include "tandem/template/jinja.hpp"

#include <new>

#include "ast.hpp"
#include "error.hpp"
#include "evaluator.hpp"
#include "lexer.hpp"
#include "parser.hpp"

namespace tandem::tmpl {

std::string Error::str() const {
  std::string out = template_name.empty() ? "<template>" : template_name;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  return out + ": " + message;
}

namespace {

Error to_error(const detail::TemplateError& e, const std::string& name, std::string_view source) {
  Error err;
  err.kind = e.kind();
  err.template_name = name;
  err.message = e.message();
  if (e.pos() != detail::kNoPos) {
    auto [line, col] = detail::SourceMap(source).locate(std::min(e.pos(), source.size()));
    err.line = line;
    err.column = col;
  }
  return err;
}

Error plain_error(Error::Kind kind, const std::string& name, std::string message) {
  Error err;
  err.kind = kind;
  err.template_name = name;
  err.message = std::move(message);
  return err;
}

template <class J>
Result<std::string> render_impl(const std::shared_ptr<const detail::Program>& program, const J& context) {
  if (!program) return plain_error(Error::Kind::runtime, "", "render() on an empty Template");
  if (!context.is_object() && !context.is_null())
    return plain_error(Error::Kind::runtime, program->name, "the render context must be a JSON object");
  try {
    detail::Evaluator ev(*program, detail::from_json(context));
    return ev.run();
  } catch (const detail::TemplateError& e) {
    return to_error(e, program->name, program->source);
  } catch (const std::bad_alloc&) {
    return plain_error(Error::Kind::runtime, program->name, "out of memory while rendering");
  } catch (const std::exception& e) {
    return plain_error(Error::Kind::runtime, program->name, std::string("internal error: ") + e.what());
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
    return plain_error(Error::Kind::syntax, program->name, std::string("internal error: ") + e.what());
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
