// Undo after kill -9: a child applies the cron step and dies by SIGKILL before verify; a fresh
// agent core in the parent replays the journal and puts every crontab back byte for byte.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cron_fixture.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

TEST_CASE("crash: SIGKILL between apply and verify, then undo from the journal") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  const auto opts = sandbox::options(sb);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    auto core = AgentCore::open(opts);
    char status = 'E';
    if (core && (*core)->apply("cron", "op-crash").ok()) status = 'A';
    if (::write(fds[1], &status, 1) != 1) ::_exit(3);
    for (;;) ::pause();  // waiting for verify that never comes
  }
  ::close(fds[1]);
  char status = 0;
  REQUIRE(::read(fds[0], &status, 1) == 1);
  ::close(fds[0]);
  ::kill(pid, SIGKILL);
  int ws = 0;
  ::waitpid(pid, &ws, 0);
  REQUIRE(status == 'A');
  REQUIRE(WIFSIGNALED(ws));
  CHECK(WTERMSIG(ws) == SIGKILL);
  CHECK(sb.read("/etc/crontab") != files.crontab);  // the child really edited

  auto core = sandbox::open_core(opts);
  CHECK(core->journal().ops_to_undo() == std::vector<std::string>{"op-crash"});
  CHECK_FALSE(core->journal().last("op-crash", Phase::verified));
  auto undone = core->undo_incomplete();
  REQUIRE_MESSAGE(undone.ok(), undone.error().text());
  CHECK((*undone)["undone"].size() == 1);
  files.check_identical(sb);
  CHECK(core->journal().ops_to_undo().empty());
}

TEST_CASE("crash: intent journaled but the edit never happened; undo finds the originals") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  {
    auto core = sandbox::open_core(sandbox::options(sb));
    StepContext ctx{core->root(), core->journal(), "op-early"};
    auto plan = core->step("cron")->plan(ctx);
    REQUIRE(plan.ok());
    REQUIRE(core->journal().append("op-early", "cron", Phase::intent, *plan).ok());
  }  // "crash" here: no apply
  auto core = sandbox::open_core(sandbox::options(sb));
  auto undone = core->undo_incomplete();
  REQUIRE(undone.ok());
  CHECK((*undone)["undone"][0]["evidence"]["already_original"].size() == 4);
  files.check_identical(sb);
}

TEST_CASE("crash: resume an op whose intent was journaled (apply with the same op id finishes it)") {
  Sandbox sb;
  sandbox::CronFiles files;
  files.install(sb);
  {
    auto core = sandbox::open_core(sandbox::options(sb));
    StepContext ctx{core->root(), core->journal(), "op-resume"};
    auto plan = core->step("cron")->plan(ctx);
    REQUIRE(plan.ok());
    REQUIRE(core->journal().append("op-resume", "cron", Phase::intent, *plan).ok());
  }
  auto core = sandbox::open_core(sandbox::options(sb));
  auto a = core->apply("cron", "op-resume");
  REQUIRE(a.ok());
  CHECK((*a)["evidence"]["lines_disabled"] == 4);
  CHECK(core->journal().records_for("op-resume").size() == 2);  // one intent, one applied
  REQUIRE(core->undo("op-resume").ok());
  files.check_identical(sb);
}
