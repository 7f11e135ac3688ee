#include <doctest/doctest.h>

#include "cron_fixture.hpp"
#include "tandem/agent/cron_scan.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

TEST_CASE("cron text: matches skip comments, keep CRLF and a missing final newline") {
  const std::string text = "# :8888 comment\r\n  a :8888 b\r\nc\nd :8888";
  auto ms = find_cron_matches(text, {":8888"});
  REQUIRE(ms.size() == 2);
  CHECK(ms[0].line == 2);
  CHECK(ms[0].text == "  a :8888 b");
  CHECK(ms[1].line == 4);
  CHECK(disable_cron_lines(text, ms, "op1") ==
        "# :8888 comment\r\n#tandem-disabled op=op1#   a :8888 b\r\nc\n#tandem-disabled op=op1# d :8888");
  CHECK(find_cron_matches(text, {}).empty());
}

TEST_CASE("cron step: check, apply, verify, undo restores every file byte for byte") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  sb.write("/etc/systemd/system/inference-watchdog.timer", "[Timer]\nOnCalendar=*:0/5\n");
  sb.write("/lib/systemd/system/lane.timer", "[Timer]\nOnBootSec=1m\n");
  sb.write("/lib/systemd/system/lane.service", "[Service]\nExecStart=/opt/serve --port :8888\n");
  sb.write("/lib/systemd/system/apt-daily.timer", "[Timer]\nOnCalendar=daily\n");
  auto core = sandbox::open_core(sandbox::options(sb));

  auto check = core->check("cron");
  REQUIRE(check.ok());
  CHECK((*check)["active_matches"] == 4);
  CHECK((*check)["timers"]["found"].size() == 2);

  auto applied = core->apply("cron", "op-cron-1");
  REQUIRE_MESSAGE(applied.ok(), applied.error().message());
  const auto& ev = (*applied)["evidence"];
  CHECK((*applied)["replayed"] == false);
  CHECK(ev["files_changed"] == 4);
  CHECK(ev["lines_disabled"] == 4);
  CHECK(ev["timers"]["found"].size() == 2);
  CHECK(ev["timers"]["stopped"].empty());
  CHECK(ev["timers"]["not_stopped_reason"].get<std::string>().find("not /") != std::string::npos);
  CHECK(sb.read("/etc/cron.d/serve-at-boot") == "#tandem-disabled op=op-cron-1# @reboot llm /opt/serve --port :8888");
  CHECK(sb.read("/etc/cron.d/glm-restart").find("\r\n#tandem-disabled op=op-cron-1# */2 * * * * root curl") != std::string::npos);
  CHECK(sb.mode("/etc/cron.d/glm-restart") == 0640);
  CHECK(sb.read("/etc/cron.d/unrelated") == "0 1 * * * root /bin/true\n");

  auto verified = core->verify("op-cron-1");
  REQUIRE(verified.ok());
  CHECK((*verified)["evidence"]["active_matches"] == 0);

  // Idempotent: the same op id answers from the journal; a new op id finds nothing left to do.
  const auto after_apply = sb.read("/etc/crontab");
  auto again = core->apply("cron", "op-cron-1");
  REQUIRE(again.ok());
  CHECK((*again)["replayed"] == true);
  CHECK((*again)["evidence"] == ev);
  auto second = core->apply("cron", "op-cron-2");
  REQUIRE(second.ok());
  CHECK((*second)["evidence"]["lines_disabled"] == 0);
  CHECK(sb.read("/etc/crontab") == after_apply);
  CHECK_FALSE(core->apply("shm", "op-cron-1").ok());  // an op id belongs to one step

  auto undone = core->undo("op-cron-1");
  REQUIRE_MESSAGE(undone.ok(), undone.error().message());
  CHECK((*undone)["evidence"]["restored"].size() == 4);
  files.check_identical(sb);
  auto undo_again = core->undo("op-cron-1");
  REQUIRE(undo_again.ok());
  CHECK((*undo_again)["replayed"] == true);
  files.check_identical(sb);
}

TEST_CASE("cron step: undo refuses to overwrite a file someone edited after the op") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  auto core = sandbox::open_core(sandbox::options(sb));
  REQUIRE(core->apply("cron", "op-a").ok());
  sb.write("/etc/crontab", "edited by hand\n", 0644);
  auto u = core->undo("op-a");
  REQUIRE_FALSE(u.ok());
  CHECK(u.error().evidence["errors"].dump().find("not overwriting") != std::string::npos);
  CHECK(sb.read("/etc/crontab") == "edited by hand\n");
  CHECK(sb.read("/etc/cron.d/serve-at-boot") == files.no_newline);  // the others were restored
}

TEST_CASE("cron step: verify fails while a matching line is active") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  auto core = sandbox::open_core(sandbox::options(sb));
  REQUIRE(core->apply("cron", "op-v").ok());
  sb.write("/etc/cron.d/new", "* * * * * root /opt/inference-watchdog\n");
  auto v = core->verify("op-v");
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().evidence["active_matches"] == 1);
}

TEST_CASE("cron step: a crontab symlinked out of the root is refused and left alone") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  ::symlink("/etc/crontab", sb.p("/etc/cron.d/host-link").c_str());
  auto core = sandbox::open_core(sandbox::options(sb));
  auto a = core->apply("cron", "op-l");
  REQUIRE(a.ok());
  CHECK((*a)["evidence"]["refused"].size() == 1);
  CHECK((*a)["evidence"]["files_changed"] == 4);
}
