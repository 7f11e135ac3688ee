// Errors are values: what failed, on which file, with the errno text, and any evidence gathered
// before the failure (a step that fails still says what it saw, e.g. both MemAvailable numbers).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>

namespace tandem::agent {

struct Error {
  std::string file;         // host or real path involved; empty when none
  std::string what;         // what went wrong, in words an operator can act on
  int err = 0;              // errno when a system call failed, else 0
  nlohmann::json evidence;  // what the step saw before failing (null when nothing)

  std::string message() const;  // "file: what: errno text"
  nlohmann::json to_json() const;
};

// Error from the current errno.
Error sys_error(std::string file, std::string what);
Error sys_error(std::string file, std::string what, int err);
Error plain_error(std::string file, std::string what);

// A value or an Error (std::expected is C++23; g++ 12 in C++20 mode does not have it).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}    // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }
  Error& error() { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// For functions with nothing to return but success.
struct Ok {};
using Status = Result<Ok>;

}  // namespace tandem::agent
