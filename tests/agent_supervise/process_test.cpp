#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "tandem/supervise/proc_stat.hpp"
#include "tandem/supervise/process.hpp"
#include "test_util.hpp"

using namespace tandem::supervise;
using namespace tandem::supervise::test;
using namespace std::chrono_literals;

namespace {
RunResult run(std::vector<std::string> argv, tandem::Duration timeout = 5s, tandem::Duration grace = 1s) {
  RunOptions o;
  o.argv = std::move(argv);
  o.timeout = timeout;
  o.kill_grace = grace;
  auto r = run_capture(o);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  return r.value();
}

bool dead(pid_t pid) {
  auto s = read_proc_stat(pid);
  return !s || s->state == 'Z' || s->state == 'X';
}
}  // namespace

TEST_CASE("run_capture reports exit codes, signals and output") {
  auto r = run({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(r.status.kind == ExitStatus::Kind::exited);
  CHECK(r.status.code == 3);
  CHECK(r.status.str() == "exit code 3");
  CHECK_FALSE(r.timed_out);
  CHECK(r.output == "out\nerr\n");

  auto k = run({"/bin/sh", "-c", "kill -KILL $$"});
  CHECK(k.status.kind == ExitStatus::Kind::signaled);
  CHECK(k.status.signal == SIGKILL);
  CHECK(k.status.str().find("signal 9") == 0);

  CHECK(run({"/bin/true"}).status.success());
}

TEST_CASE("the child gets exactly the given environment") {
  RunOptions o;
  o.argv = {"/usr/bin/env"};
  o.env = {{"PATH", "/usr/bin:/bin"}, {"TANDEM_X", "1"}};
  ::setenv("AGENT_SECRET", "do-not-leak", 1);
  auto r = run_capture(o);
  REQUIRE(r.ok());
  CHECK(r->output == "PATH=/usr/bin:/bin\nTANDEM_X=1\n");
}

TEST_CASE("argv[0] must be absolute and exec failures come back as errors") {
  RunOptions ro;
  ro.argv = {"sh", "-c", "true"};
  auto rel = run_capture(ro);
  REQUIRE_FALSE(rel.ok());
  CHECK(rel.error().message.find("absolute") != std::string::npos);

  auto missing = spawn(SpawnOptions{{"/nonexistent/engine"}, base_env(), "", "", "/"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("execve") != std::string::npos);
  CHECK(missing.error().message.find("/nonexistent/engine") != std::string::npos);

  auto nouser = spawn(SpawnOptions{{"/bin/true"}, base_env(), "no-such-user-tandem", "", "/"});
  REQUIRE_FALSE(nouser.ok());
  CHECK(nouser.error().message.find("does not exist") != std::string::npos);
}

TEST_CASE("a timeout kills the whole group, grandchildren included, even when TERM is ignored") {
  auto start = std::chrono::steady_clock::now();
  // sh ignores TERM and so does its background sleep (ignored dispositions survive exec).
  auto r = run({"/bin/sh", "-c", "trap '' TERM; /bin/sleep 30 & echo $!; wait"}, 300ms, 200ms);
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(r.timed_out);
  CHECK(r.status.kind == ExitStatus::Kind::signaled);
  CHECK(r.status.signal == SIGKILL);
  pid_t grandchild = static_cast<pid_t>(std::stol(r.output));
  CHECK(grandchild > 0);
  CHECK(dead(grandchild));
  CHECK(took < 3s);
}

TEST_CASE("terminate_group: TERM is enough for a well-behaved group") {
  TempDir dir;
  auto c = spawn(SpawnOptions{{"/bin/sh", "-c", "/bin/sleep 30 & /bin/sleep 30; wait"}, base_env(), "", "", "/"});
  REQUIRE(c.ok());
  CHECK(c->pgid == c->pid);
  auto s = read_proc_stat(c->pid);
  REQUIRE(s);
  CHECK(s->pgrp == c->pid);     // own process group
  CHECK(s->session == c->pid);  // own session
  std::this_thread::sleep_for(100ms);
  CHECK(live_group_members(c->pgid).size() == 3);
  auto t = terminate_group(c.value(), 2s);
  REQUIRE(t.ok());
  CHECK(t->kind == ExitStatus::Kind::signaled);
  CHECK(t->signal == SIGTERM);
  CHECK(live_group_members(c->pgid).empty());
}

TEST_CASE("wait_for times out on a running child and reaps a finished one") {
  auto c = spawn(SpawnOptions{{"/bin/sleep", "0.3"}, base_env(), "", "", "/"});
  REQUIRE(c.ok());
  auto w = wait_for(c->pid, 50ms);
  REQUIRE(w.ok());
  CHECK_FALSE(w.value().has_value());
  w = wait_for(c->pid, 3s);
  REQUIRE(w.ok());
  REQUIRE(w.value().has_value());
  CHECK(w.value()->success());
}

TEST_CASE("stdout and stderr are appended to a 0640 log file") {
  TempDir dir;
  const std::string log = dir / "rank.log";
  for (int i = 0; i < 2; ++i) {
    auto c = spawn(SpawnOptions{{"/bin/sh", "-c", "echo out; echo err >&2"}, base_env(), "", log, "/"});
    REQUIRE(c.ok());
    auto w = wait_for(c->pid, 3s);
    REQUIRE(w.ok());
    REQUIRE(w.value());
  }
  CHECK(slurp(log) == "out\nerr\nout\nerr\n");
  struct stat st {};
  REQUIRE(::stat(log.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
}

TEST_CASE("no agent file descriptor leaks into the child") {
  TempDir dir;
  // A descriptor opened without O_CLOEXEC, as a careless library would.
  int leaky = ::open("/dev/null", O_RDONLY);
  REQUIRE(leaky >= 3);
  auto c = spawn(SpawnOptions{{"/bin/sleep", "5"}, base_env(), "", dir / "log", "/"});
  REQUIRE(c.ok());
  // Let the dynamic loader finish: it briefly holds the shared libraries it maps open as fd 3+.
  std::this_thread::sleep_for(200ms);
  std::vector<std::string> fds;
  std::string targets;
  for (auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(c->pid) + "/fd")) {
    fds.push_back(e.path().filename().string());
    targets += fds.back() + " -> " + std::filesystem::read_symlink(e.path()).string() + "\n";
  }
  std::sort(fds.begin(), fds.end());
  const std::vector<std::string> only_stdio{"0", "1", "2"};
  CHECK_MESSAGE(fds == only_stdio, targets);
  ::close(leaky);
  CHECK(terminate_group(c.value(), 1s).ok());
}

TEST_CASE("run user: switches to nobody as root, refuses a different user otherwise") {
  RunOptions o;
  o.argv = {"/usr/bin/id"};
  o.run_user = "nobody";
  auto r = run_capture(o);
  if (::geteuid() == 0) {
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    CHECK(r->output.find("uid=65534(nobody)") == 0);
    CHECK(r->output.find("gid=65534(nogroup)") != std::string::npos);
    CHECK(r->output.find("(root)") == std::string::npos);  // no root supplementary group left
  } else {
    o.run_user = ::geteuid() == 65534 ? "root" : "nobody";  // a user other than ourselves
    r = run_capture(o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("not root") != std::string::npos);
  }
}
