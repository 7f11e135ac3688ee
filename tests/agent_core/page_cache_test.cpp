#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.hpp"
#include "tandem/agent/page_cache_step.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

namespace {
// 98.2 GiB in kB, as the kernel writes it.
const std::string kMeminfo = "MemTotal:       127535452 kB\nMemFree:         1000000 kB\nMemAvailable:   102970573 kB\n";
constexpr std::uint64_t kGiB = 1ull << 30;
}  // namespace

TEST_CASE("page cache: drops, reads MemAvailable, fails with both numbers when short") {
  Sandbox sb;
  sb.write("/proc/meminfo", kMeminfo);
  sb.write("/proc/sys/vm/drop_caches", "");
  auto opts = sandbox::options(sb);
  opts.hygiene.min_mem_available = 115 * kGiB;
  auto core = sandbox::open_core(opts);
  auto a = core->apply("page_cache", "op-pc");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().message == "MemAvailable 98.2 GiB is below the required 115 GiB");
  CHECK(evidence(a.error())["drop"]["done"] == true);
  CHECK(evidence(a.error())["mem_available_bytes"] == 102970573ull * 1024);
  CHECK(evidence(a.error())["min_required_bytes"] == 115 * kGiB);
  CHECK(sb.read("/proc/sys/vm/drop_caches") == "3");

  opts.hygiene.min_mem_available = 90 * kGiB;
  auto core2 = sandbox::open_core(opts);
  auto ok = core2->apply("page_cache", "op-pc-2");
  REQUIRE(ok.ok());
  CHECK((*ok)["evidence"]["ok"] == true);
  CHECK((*ok)["evidence"]["mem_available"] == "98.2 GiB");
  CHECK(core2->verify("op-pc-2").ok());
}

TEST_CASE("page cache: a kernel refusal is reported and the MemAvailable check still runs") {
  Sandbox sb;
  sb.write("/proc/meminfo", kMeminfo);
  sb.write("/proc/sys/vm/drop_caches", "", 0444);
  auto opts = sandbox::options(sb);
  opts.hygiene.min_mem_available = 90 * kGiB;
  auto core = sandbox::open_core(opts);
  StepContext ctx{core->root(), core->journal(), "op-refused"};
  Step* step = core->step("page_cache");
  // Root ignores file modes, so the refusal is provoked in a child that gave up root.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(2);
    auto r = step->apply(ctx, json::object());
    std::string out = r ? r->dump() : to_json(r.error()).dump();
    if (::write(fds[1], out.data(), out.size()) < 0) ::_exit(3);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int ws = 0;
  ::waitpid(pid, &ws, 0);
  REQUIRE(WIFEXITED(ws));
  REQUIRE(WEXITSTATUS(ws) == 0);
  auto ev = json::parse(out);
  CHECK(ev["drop"]["done"] == false);
  CHECK(ev["drop"]["refused_by_kernel"] == true);
  CHECK(ev["drop"]["reason"].get<std::string>().find("the kernel refused the page-cache drop") != std::string::npos);
  CHECK(ev["ok"] == true);
  CHECK(ev["mem_available"] == "98.2 GiB");
  CHECK(sb.read("/proc/sys/vm/drop_caches").empty());
}

TEST_CASE("page cache: MemAvailable parsing and GiB text") {
  auto v = parse_mem_available(kMeminfo, "/proc/meminfo");
  REQUIRE(v.ok());
  CHECK(*v == 102970573ull * 1024);
  CHECK_FALSE(parse_mem_available("MemTotal: 1 kB\n", "/proc/meminfo").ok());
  CHECK(gib_text(115 * kGiB) == "115 GiB");
  CHECK(gib_text(kGiB / 2) == "0.5 GiB");
}
