// Errors are values: a failure carries a sentence with its context ("10.0.0.2:7443: TLS handshake
// failed: ..."), so the caller can print it, wrap it, or put it in a report without a log search.
// One definition for the whole project; layers with richer errors (agent core, templates,
// supervise) keep their own Error types.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tandem {

// A unit value for Result<Ok> (some layers return "done, nothing to give back" that way).
struct Ok {};


struct Error {
  std::string message;

  // "context: message", so each layer adds where it was without losing what went wrong.
  Error with_context(const std::string& context) const { return Error{context + ": " + message}; }
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // Reading the value of a failed Result throws std::bad_variant_access: a programming error.
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

}  // namespace tandem
