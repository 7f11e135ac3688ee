#include <doctest/doctest.h>

#include "sandbox.hpp"
#include "tandem/agent/node_root.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

namespace {
NodeRoot make_root(const Sandbox& sb) {
  auto r = NodeRoot::open(sb.root, {"/etc/cron.d", "/dev/shm", "/models/target", "/var/lib/tandemd"});
  REQUIRE(r.ok());
  return *r;
}
}  // namespace

TEST_CASE("node root: allowed paths resolve under the root, others are refused") {
  Sandbox sb;
  sb.write("/etc/cron.d/job", "x\n");
  sb.write("/etc/shadow", "secret\n");
  auto root = make_root(sb);
  auto ok = root.resolve("/etc/cron.d/job");
  REQUIRE(ok.ok());
  CHECK(*ok == std::string(::realpath(sb.root.c_str(), nullptr)) + "/etc/cron.d/job");
  CHECK(root.resolve("/var/lib/tandemd/not-yet/there").ok());  // missing paths resolve too

  auto shadow = root.resolve("/etc/shadow");
  REQUIRE_FALSE(shadow.ok());
  CHECK(shadow.error().text().find("outside the agent's allow-list") != std::string::npos);
  CHECK_FALSE(root.resolve("/etc/cron.dx").ok());  // prefixes match whole components
  auto dots = root.resolve("/etc/cron.d/../shadow");
  REQUIRE_FALSE(dots.ok());
  CHECK(dots.error().text().find("'..'") != std::string::npos);
  CHECK_FALSE(root.resolve("etc/cron.d/job").ok());
}

TEST_CASE("node root: symlinks that escape the root or the allow-list are refused") {
  Sandbox sb;
  sb.mkdir("/etc/cron.d");
  sb.write("/etc/shadow", "secret\n");
  sb.write("/dev/shm/real", "x");
  auto root = make_root(sb);
  ::symlink("/etc/passwd", sb.p("/etc/cron.d/escape").c_str());          // absolute: the HOST's file
  ::symlink("../../../../../../etc", sb.p("/etc/cron.d/up").c_str());     // climbs out of the root
  ::symlink(sb.p("/etc/shadow").c_str(), sb.p("/etc/cron.d/inside").c_str());  // in root, not allowed
  ::symlink(sb.p("/dev/shm/real").c_str(), sb.p("/etc/cron.d/ok").c_str());     // in root, allowed
  ::symlink("/nonexistent/target", sb.p("/etc/cron.d/dangling").c_str());

  auto esc = root.resolve("/etc/cron.d/escape");
  REQUIRE_FALSE(esc.ok());
  CHECK(esc.error().text().find("outside the node root") != std::string::npos);
  CHECK_FALSE(root.resolve("/etc/cron.d/up/passwd").ok());
  auto in = root.resolve("/etc/cron.d/inside");
  REQUIRE_FALSE(in.ok());
  CHECK(in.error().text().find("allow-list") != std::string::npos);
  CHECK(root.resolve("/etc/cron.d/ok").ok());
  auto dang = root.resolve("/etc/cron.d/dangling");
  REQUIRE_FALSE(dang.ok());
  CHECK(dang.error().text().find("dangling symlink") != std::string::npos);

  // resolve_entry looks at the link itself, for lstat/unlink.
  auto entry = root.resolve_entry("/etc/cron.d/escape");
  REQUIRE(entry.ok());
  CHECK(entry->substr(entry->size() - 18) == "/etc/cron.d/escape");
}

TEST_CASE("node root: an allowed directory that is itself a link out of the root is refused") {
  Sandbox sb;
  sb.mkdir("/dev");
  ::symlink("/dev/shm", sb.p("/dev/shm").c_str());  // the host's real /dev/shm
  auto root = make_root(sb);
  CHECK_FALSE(root.resolve("/dev/shm").ok());
  CHECK_FALSE(root.resolve("/dev/shm/torch_1").ok());
}

TEST_CASE("node root: manifest allow-list names the manifest's paths") {
  tandem::Engine e;
  e.binary = "/opt/bin/serve";
  e.cache_dir = "/home/u/.cache";
  e.pins.push_back({"/opt/cfg.json", "", {}});
  auto a = NodeRoot::manifest_allow_list(e, "/var/lib/tandemd");
  for (const char* p : {"/etc/crontab", "/etc/cron.d", "/dev/shm", "/proc/meminfo", "/proc/sys/vm/drop_caches",
                        "/opt/bin/serve", "/home/u/.cache", "/opt/cfg.json", "/var/lib/tandemd"})
    CHECK(std::find(a.begin(), a.end(), p) != a.end());
  CHECK(path_within("/a/b", "/a"));
  CHECK_FALSE(path_within("/ab", "/a"));
  CHECK(normalize_host_path("/a//b/./c/") == "/a/b/c");
  CHECK(normalize_host_path("/a/../b").empty());
}
