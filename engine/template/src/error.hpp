// Internal failure signal. The evaluator and parser unwind with this exception; the public API
// (jinja.cpp) catches it and hands out an Error value, so no exception crosses the library edge.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "tandem/template/jinja.hpp"

namespace tandem::tmpl::detail {

constexpr std::size_t kNoPos = static_cast<std::size_t>(-1);

class TemplateError : public std::runtime_error {
 public:
  TemplateError(ErrorKind kind, std::string message, std::size_t pos = kNoPos)
      : std::runtime_error(message), kind_(kind), message_(std::move(message)), pos_(pos) {}
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  std::size_t pos() const { return pos_; }       // byte offset in the source, or kNoPos
  void set_pos(std::size_t p) { if (pos_ == kNoPos) pos_ = p; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::size_t pos_;
};

[[noreturn]] inline void fail(std::string message, std::size_t pos = kNoPos) {
  throw TemplateError(ErrorKind::runtime, std::move(message), pos);
}
[[noreturn]] inline void syntax_error(std::string message, std::size_t pos) {
  throw TemplateError(ErrorKind::syntax, std::move(message), pos);
}

}  // namespace tandem::tmpl::detail
