// Errors are values: a Result<T> holds either the value or an Error that says what failed and where
// (file, tensor, field), ready to show to an operator as it is.
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace tandem::model {

struct Error {
  std::string message;
};

struct Ok {};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose, `return value;`
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

using Status = Result<Ok>;

inline Error error(std::string message) { return Error{std::move(message)}; }

}  // namespace tandem::model
