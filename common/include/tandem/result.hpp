// Errors are values: a failure carries what went wrong, where, and the failure it grew from, so the
// caller can print it, wrap it, or put it in a report without a log search. The one definition for
// the whole project, CUDA code included (cuda_check.hpp makes these from cudaError_t); a function
// that can fail returns Result<T> (or Status) and throws nothing across that boundary.
#pragma once
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tandem {

// "Done, nothing to give back": `return Ok{};` from a Status function reads as what it means.
struct Ok {};

struct Error {
  // What went wrong, in words an operator can act on ("TLS handshake failed: ..."); when a system
  // call failed it ends with the errno text. Without `where` it is the whole sentence.
  std::string message;
  // Where it happened: "gemv.cu:88" (the CUDA check), a path (agent steps), a template position
  // ("chat.jinja:3:7") or a component; empty when the message already says it.
  std::string where{};
  int sys_errno = 0;  // errno when a system call failed, else 0 (callers branch on ENOSPC, EEXIST, ...)
  int code = 0;       // a layer's own classification when callers branch on it (tmpl::ErrorKind); else 0
  // JSON text of what was observed before failing (both MemAvailable numbers, the port owner); empty
  // when nothing. Text, so this header stays free of a JSON library and usable from nvcc.
  std::string evidence{};
  // The failure this one reports on (set by with_context), innermost last; null for a root failure.
  std::shared_ptr<const Error> cause{};

  // "where: message": the line to print or send.
  std::string text() const { return where.empty() ? message : where + ": " + message; }

  // "context: where: message" -- each layer adds what it was doing. The wrapped error stays
  // reachable as `cause` (with its own where); errno, code and evidence carry up unchanged so a
  // caller can still branch on them.
  Error with_context(const std::string& context) const {
    return Error{context + ": " + text(), "", sys_errno, code, evidence, std::make_shared<const Error>(*this)};
  }

  // The first failure of the chain: its `where` names the line that detected the problem.
  const Error& root_cause() const {
    const Error* e = this;
    while (e->cause) e = e->cause.get();
    return *e;
  }
};

// An Error located somewhere: error_at("/dev/shm/x", "not a directory").
inline Error error_at(std::string where, std::string message) { return Error{std::move(message), std::move(where)}; }

// A failed system call: "what: strerror(err)", with err kept for callers that branch on it.
inline Error sys_error(const std::string& what, int err = errno) {
  return Error{what + ": " + std::strerror(err), "", err};
}

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

  const Error& error() const& { return std::get<1>(v_); }
  Error& error() & { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Ok) {}                                              // NOLINT: `return Ok{};`
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return *error_; }
  Error& error() & { return *error_; }
  Error&& error() && { return std::move(*error_); }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

}  // namespace tandem
