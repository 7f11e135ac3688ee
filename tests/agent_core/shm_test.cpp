#include <doctest/doctest.h>
#include <unistd.h>

#include "sandbox.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

TEST_CASE("shm step: removes matching regular files only; a symlink is skipped and its target untouched") {
  Sandbox sb;
  sb.write("/dev/shm/torch_123_456", std::string(1000, 'a'));
  sb.write("/dev/shm/psm_abc", std::string(24, 'b'));
  sb.write("/dev/shm/nccl-xyz", "");
  sb.write("/dev/shm/keep-me", "x");
  sb.write("/outside/precious", "do not touch");      // in the root but outside /dev/shm
  sb.write("/dev/shm/psm_dir/torch_inner", "inner");  // a directory named like a pattern
  ::symlink(sb.p("/outside/precious").c_str(), sb.p("/dev/shm/torch_link").c_str());
  Sandbox host;  // a second tree standing in for a file outside the root entirely
  host.write("/victim", "host file");
  ::symlink(host.p("/victim").c_str(), sb.p("/dev/shm/nccl-escape").c_str());
  auto core = sandbox::open_core(sandbox::options(sb));

  auto check = core->check("shm");
  REQUIRE(check.ok());
  CHECK((*check)["count"] == 3);
  CHECK(sb.exists("/dev/shm/torch_123_456"));  // check changes nothing

  auto a = core->apply("shm", "op-shm");
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  const auto& ev = (*a)["evidence"];
  CHECK(ev["count"] == 3);
  CHECK(ev["bytes_freed"] == 1024);
  std::vector<std::string> names;
  for (const auto& r : ev["removed"]) names.push_back(r["name"]);
  CHECK(names == std::vector<std::string>{"nccl-xyz", "psm_abc", "torch_123_456"});
  CHECK(ev["skipped"].size() == 3);  // nccl-escape, psm_dir, torch_link
  CHECK(ev["skipped"].dump().find("symlink: skipped") != std::string::npos);

  CHECK(sb.exists("/dev/shm/torch_link"));
  CHECK(sb.exists("/dev/shm/nccl-escape"));
  CHECK(sb.read("/outside/precious") == "do not touch");
  CHECK(host.read("/victim") == "host file");
  CHECK(sb.read("/dev/shm/psm_dir/torch_inner") == "inner");  // never recursed
  CHECK(sb.exists("/dev/shm/keep-me"));

  CHECK(core->verify("op-shm").ok());
  auto again = core->apply("shm", "op-shm-2");
  REQUIRE(again.ok());
  CHECK((*again)["evidence"]["count"] == 0);
  auto u = core->undo("op-shm");
  REQUIRE(u.ok());
  CHECK((*u)["evidence"]["undone"] == false);
}

TEST_CASE("shm step: /dev/shm that links out of the root is refused") {
  Sandbox sb;
  Sandbox host;
  host.write("/torch_1", "x");
  sb.mkdir("/dev");
  ::symlink(host.root.c_str(), sb.p("/dev/shm").c_str());
  auto core = sandbox::open_core(sandbox::options(sb));
  auto a = core->apply("shm", "op-escape");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("outside the node root") != std::string::npos);
  CHECK(host.read("/torch_1") == "x");
}
