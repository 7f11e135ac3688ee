// Errors are values: every fallible operation in the supervisor returns Result<T>, whose error
// says what was being done and why it failed ("spawn /usr/bin/x: execve: No such file or directory").
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tandem::supervise {

struct Error {
  std::string message;
  int sys_errno = 0;  // errno when the cause was a system call, else 0

  // "context: message" -- callers add what they were doing as the error travels up.
  Error context(std::string_view what) const;
};

// An Error from errno: "what: strerror(errno)".
Error sys_error(std::string_view what, int err);
Error sys_error(std::string_view what);  // uses the current errno

struct Ok {};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose, like std::expected
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

}  // namespace tandem::supervise
