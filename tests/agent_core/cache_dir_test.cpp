#include <doctest/doctest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

namespace {
uid_t owner_of(const Sandbox& sb, const std::string& host) {
  struct stat st {};
  ::lstat(sb.p(host).c_str(), &st);
  return st.st_uid;
}
// The run user these tests ask for: "nobody" when we are root (so ownership really changes),
// else ourselves.
std::string run_user() { return ::geteuid() == 0 ? "nobody" : ""; }
uid_t run_uid() { return ::geteuid() == 0 ? ::getpwnam("nobody")->pw_uid : ::geteuid(); }
}  // namespace

TEST_CASE("cache dir: a missing dir is created with its parents, owned by the run user; undo removes only those") {
  Sandbox sb;
  sb.mkdir("/home");
  auto opts = sandbox::options(sb);
  opts.engine.run_user = run_user();
  auto core = sandbox::open_core(opts);
  auto check = core->check("cache_dir");
  REQUIRE(check.ok());
  CHECK((*check)["exists"] == false);

  auto a = core->apply("cache_dir", "op-cd");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  const auto& ev = (*a)["evidence"];
  CHECK(ev["created"] == json::array({"/home/llm", "/home/llm/.cache", "/home/llm/.cache/vllm"}));
  CHECK(ev["ok"] == true);
  CHECK(ev["writable"] == true);
  CHECK(owner_of(sb, "/home/llm/.cache/vllm") == run_uid());
  CHECK(owner_of(sb, "/home/llm") == run_uid());
  CHECK(core->verify("op-cd").ok());
  auto again = core->apply("cache_dir", "op-cd-2");
  REQUIRE(again.ok());
  CHECK((*again)["evidence"]["created"].empty());

  auto u = core->undo("op-cd");
  REQUIRE(u.ok());
  CHECK((*u)["evidence"]["removed"].size() == 3);
  CHECK_FALSE(sb.exists("/home/llm"));
  CHECK(sb.exists("/home"));  // was there before
}

TEST_CASE("cache dir: undo keeps a created dir that is no longer empty") {
  Sandbox sb;
  sb.mkdir("/home/llm/.cache");
  auto opts = sandbox::options(sb);
  opts.engine.run_user = run_user();
  auto core = sandbox::open_core(opts);
  REQUIRE(core->apply("cache_dir", "op-k").ok());
  sb.write("/home/llm/.cache/vllm/compiled.bin", "x");
  auto u = core->undo("op-k");
  REQUIRE(u.ok());
  CHECK((*u)["evidence"]["kept"].size() == 1);
  CHECK(sb.exists("/home/llm/.cache/vllm/compiled.bin"));
}

TEST_CASE("cache dir: a root-owned dir is refused for a non-root run user, with a clear message") {
  if (::geteuid() != 0) {
    MESSAGE("needs root to create a root-owned dir for another user; skipped");
    return;
  }
  Sandbox sb;
  sb.mkdir("/home/llm/.cache/vllm");  // we are root: owned by root
  auto opts = sandbox::options(sb);
  opts.engine.run_user = "nobody";
  auto core = sandbox::open_core(opts);
  auto c = core->check("cache_dir");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message.find("owned by root but the engine runs as 'nobody'") != std::string::npos);
  CHECK(evidence(c.error())["owner_uid"] == 0);
  auto a = core->apply("cache_dir", "op-root");
  REQUIRE_FALSE(a.ok());
  CHECK(owner_of(sb, "/home/llm/.cache/vllm") == 0);  // refused, not chowned

  ::chown(sb.p("/home/llm/.cache/vllm").c_str(), run_uid(), 0);
  auto core2 = sandbox::open_core(opts);
  CHECK(core2->apply("cache_dir", "op-owned").ok());
}

TEST_CASE("cache dir: an unknown run user is an error") {
  Sandbox sb;
  auto opts = sandbox::options(sb);
  opts.engine.run_user = "no-such-user-tandem";
  auto core = sandbox::open_core(opts);
  auto c = core->check("cache_dir");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message.find("does not exist") != std::string::npos);
}
