// common/include/tandem/result.hpp: the one Error every layer returns.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>

#include "tandem/result.hpp"

using tandem::Error;
using tandem::Ok;
using tandem::Result;
using tandem::Status;

TEST_CASE("Error: text() puts where before the message; with_context keeps the chain and what callers branch on") {
  Error root{"cudaMemcpy(a, b, n, k) failed: cudaErrorInvalidValue: invalid argument", "gemv.cu:88"};
  root.sys_errno = ENOSPC;
  root.code = 3;
  root.evidence = R"({"bytes":4})";
  CHECK(root.text() == "gemv.cu:88: cudaMemcpy(a, b, n, k) failed: cudaErrorInvalidValue: invalid argument");
  CHECK(Error{"plain"}.text() == "plain");

  const Error outer = root.with_context("layer 3").with_context("CUDA step");
  CHECK(outer.text() == "CUDA step: layer 3: gemv.cu:88: cudaMemcpy(a, b, n, k) failed: cudaErrorInvalidValue: invalid argument");
  CHECK(outer.where.empty());
  CHECK(outer.sys_errno == ENOSPC);
  CHECK(outer.code == 3);
  CHECK(outer.evidence == R"({"bytes":4})");
  REQUIRE(outer.cause);
  CHECK(outer.cause->message == "layer 3: gemv.cu:88: cudaMemcpy(a, b, n, k) failed: cudaErrorInvalidValue: invalid argument");
  CHECK(&outer.root_cause() != &outer);
  CHECK(outer.root_cause().where == "gemv.cu:88");
  CHECK(root.root_cause().where == "gemv.cu:88");  // a root is its own root cause
}

TEST_CASE("sys_error and error_at") {
  const Error e = tandem::sys_error("open /x", ENOENT);
  CHECK(e.message == std::string("open /x: ") + std::strerror(ENOENT));
  CHECK(e.sys_errno == ENOENT);
  CHECK(tandem::error_at("/dev/shm/x", "not a directory").text() == "/dev/shm/x: not a directory");
}

TEST_CASE("Status and Result") {
  Status ok = Ok{};
  CHECK(ok.ok());
  Status bad = Error{"no"};
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message == "no");
  Result<int> r = 4;
  CHECK(*r == 4);
  Result<int> f = Error{"why", "here"};
  CHECK_FALSE(f);
  CHECK(f.error().text() == "here: why");
}
