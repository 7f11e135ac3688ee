#include <doctest/doctest.h>
#include <sys/stat.h>

#include "cron_fixture.hpp"
#include "tandem/agent/cron_scan.hpp"
#include "tandem/agent/fs.hpp"

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
  REQUIRE_MESSAGE(applied.ok(), applied.error().text());
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
  REQUIRE_MESSAGE(undone.ok(), undone.error().text());
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
  CHECK(evidence(u.error())["errors"].dump().find("not overwriting") != std::string::npos);
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
  CHECK(evidence(v.error())["active_matches"] == 1);
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

namespace {
ino_t inode_of(const Sandbox& sb, const std::string& path) {
  struct stat st{};
  REQUIRE(::stat(sb.p(path).c_str(), &st) == 0);
  return st.st_ino;
}
}  // namespace

// tandemd.service makes /etc/crontab writable with ReadWritePaths= (a bind mount of that one
// file); the dead-man's restore runs outside the service, and a rename over the file there would
// detach the service's mount, leaving the running agent a read-only crontab.
TEST_CASE("cron step: apply and undo keep each crontab's inode") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  const auto crontab = inode_of(sb, "/etc/crontab");
  const auto boot = inode_of(sb, "/etc/cron.d/serve-at-boot");
  auto core = sandbox::open_core(sandbox::options(sb));
  REQUIRE(core->apply("cron", "op-i").ok());
  CHECK(sb.read("/etc/crontab").find("#tandem-disabled op=op-i#") != std::string::npos);
  CHECK(inode_of(sb, "/etc/crontab") == crontab);
  CHECK(inode_of(sb, "/etc/cron.d/serve-at-boot") == boot);
  REQUIRE(core->undo("op-i").ok());
  files.check_identical(sb);
  CHECK(inode_of(sb, "/etc/crontab") == crontab);
  CHECK(inode_of(sb, "/etc/cron.d/serve-at-boot") == boot);
}

TEST_CASE("cron step: an undo killed mid-rewrite is finished by the next undo") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  const auto crontab = sb.read("/etc/crontab");
  REQUIRE(!crontab.empty());
  REQUIRE(crontab.back() == '\n');
  auto core = sandbox::open_core(sandbox::options(sb));
  REQUIRE(core->apply("cron", "op-k").ok());
  // What rewrite_in_place leaves when killed between its padded write and its truncate: the
  // original, then blank lines (after a final newline) or spaces (after none) to the old length.
  const auto edited_crontab = sb.read("/etc/crontab").size();
  const auto edited_boot = sb.read("/etc/cron.d/serve-at-boot").size();
  sb.write("/etc/crontab", crontab + std::string(edited_crontab - crontab.size(), '\n'), 0644);
  sb.write("/etc/cron.d/serve-at-boot", files.no_newline + std::string(edited_boot - files.no_newline.size(), ' '), 0644);
  CHECK(is_rewrite_leftover(sb.read("/etc/crontab"), crontab));
  CHECK(is_rewrite_leftover(sb.read("/etc/cron.d/serve-at-boot"), files.no_newline));
  auto u = core->undo("op-k");
  REQUIRE_MESSAGE(u.ok(), u.error().text());
  files.check_identical(sb);

  // Anything else after the original is someone's edit, not a leftover.
  CHECK_FALSE(is_rewrite_leftover(crontab + "\n* * * * * root x\n", crontab));
  CHECK_FALSE(is_rewrite_leftover(crontab + "  ", crontab));  // spaces only pad an unterminated last line
  CHECK_FALSE(is_rewrite_leftover(crontab, crontab));
}

TEST_CASE("cron step: an intent cut short or edited in the journal is an Error naming the field, not a throw") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  auto core = sandbox::open_core(sandbox::options(sb));
  StepContext ctx{core->root(), core->journal(), "op-bad-intent"};
  auto plan = core->step("cron")->plan(ctx);
  REQUIRE(plan.ok());

  json no_files = *plan;
  no_files.erase("files");
  auto a = core->step("cron")->apply(ctx, no_files);
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("\"files\" is missing") != std::string::npos);

  json bad_mode = *plan;
  bad_mode["files"][0]["mode"] = "rw-r--r--";
  auto u = core->step("cron")->undo(ctx, bad_mode);
  REQUIRE_FALSE(u.ok());
  CHECK(u.error().text().find("a file is not {path,") != std::string::npos);

  json bad_line = *plan;
  bad_line["files"][0]["lines"][0].erase("pattern");
  auto v = core->step("cron")->verify(ctx, bad_line, json::object());
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().text().find("a line is not {line, text, pattern}") != std::string::npos);

  json bad_timer = *plan;
  bad_timer["timers"]["to_stop"] = json::array({42});
  auto t = core->step("cron")->apply(ctx, bad_timer);
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().text().find("a timer to stop is not a unit name") != std::string::npos);
  files.check_identical(sb);  // nothing was edited on the way to any of these errors
}
