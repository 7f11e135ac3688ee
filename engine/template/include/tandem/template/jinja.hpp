// Jinja2 subset for chat templates: parse once, render many times with nlohmann::json values.
//
// Errors are values (tandem::Result), never exceptions or crashes: a bad template or a runtime failure
// (undefined method, raise_exception(), wrong type) comes back as an Error with the template name,
// line and column, so the server can answer 400 with a message the operator can act on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "tandem/result.hpp"

namespace tandem::tmpl {

// Template failures are the project's Error (tandem/result.hpp): `where` is "name:line:column" (the
// position left out when unknown, "<template>" for an unnamed one), `code` the ErrorKind, and
// text() reads "name:line:column: message".
enum class ErrorKind {
  syntax = 1,   // the template does not parse
  runtime = 2,  // rendering failed (type error, undefined method, ...)
  raised = 3,   // the template called raise_exception(message); message is the template's text
  io = 4,       // a template source could not be read
};
inline ErrorKind kind_of(const Error& e) { return static_cast<ErrorKind>(e.code); }
// A template Error; line 0 when no position applies (column is 1-based, in bytes).
Error template_error(ErrorKind kind, const std::string& name, std::string message, int line, int column);

struct Options {
  // transformers compiles chat templates with trim_blocks=True, lstrip_blocks=True.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // strftime_now() uses this time (seconds since the epoch, local time zone) when set; tests pin it.
  std::optional<std::int64_t> fixed_time;
  // Guards against runaway templates (fuzzed or hostile): output size and loop iterations.
  std::size_t max_output_bytes = std::size_t{64} << 20;
  std::size_t max_iterations = 10'000'000;
};

namespace detail { struct Program; }

class Template {
 public:
  // Parses `source`; `name` appears in every error message.
  static Result<Template> parse(std::string_view source, std::string name, Options options = {});

  // Renders with the top-level variables of `context` (a JSON object). ordered_json keeps the
  // caller's key order, which tojson reproduces (as Python dicts do); json sorts keys.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  Result<std::string> render(const nlohmann::json& context) const;

  const std::string& name() const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace tandem::tmpl
