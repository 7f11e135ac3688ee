// Jinja2 subset for chat templates: parse once, render many times with nlohmann::json values.
//
// Errors are values (Result), never exceptions or crashes: a bad template or a runtime failure
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

namespace tandem::tmpl {

struct Error {
  enum class Kind {
    syntax,   // the template does not parse
    runtime,  // rendering failed (type error, undefined method, ...)
    raised,   // the template called raise_exception(message); message is the template's text
    io,       // a template source could not be read
  };
  Kind kind = Kind::runtime;
  std::string template_name;
  int line = 0;    // 1-based; 0 when no position applies
  int column = 0;  // 1-based, in bytes
  std::string message;

  // "name:line:column: message" (position left out when unknown).
  std::string str() const;
};

// A value or an Error. Small on purpose: C++20 has no std::expected.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}      // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

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
