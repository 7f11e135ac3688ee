#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tandem/supervise/deadman.hpp"
#include "tandem/supervise/proc_stat.hpp"
#include "test_util.hpp"

using namespace tandem::supervise;
using namespace tandem::supervise::test;
using namespace std::chrono_literals;
using tandem::Command;

namespace {

// Each firing appends a line to <dir>/fired, so "never twice" is countable.
std::vector<Command> rollback(const TempDir& dir) {
  Command c;
  c.run = {"/bin/sh", "-c", "echo fired >> " + (dir / "fired") + "; echo rolled back"};
  c.timeout = 5s;
  return {c};
}

int fired_count(const TempDir& dir) {
  std::ifstream in(dir / "fired");
  int n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

std::unique_ptr<Deadman> open_dm(const TempDir& dir, tandem::DeadmanBackend backend = tandem::DeadmanBackend::agent) {
  DeadmanOptions o;
  o.state_dir = dir / "deadman";
  o.bind = "glm53";
  o.backend = backend;
  o.kill_grace = 200ms;
  auto d = Deadman::open(o);
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error().message));
  return std::move(d).value();
}

DeadmanStatus status_of(const Deadman& d) {
  auto s = d.status();
  REQUIRE(s.ok());
  return s.value();
}

}  // namespace

TEST_CASE("dead-man (agent): fires on time, once, recording each command's outcome") {
  TempDir dir;
  auto dm = open_dm(dir);
  CHECK_FALSE(status_of(*dm).armed);
  auto t0 = std::chrono::steady_clock::now();
  auto armed = dm->arm(1s, rollback(dir));
  REQUIRE_MESSAGE(armed.ok(), (armed.ok() ? "" : armed.error().message));
  CHECK(armed->armed);
  CHECK(armed->seconds_left == 1);
  CHECK(armed->deadline.has_value());
  CHECK(armed->backend == tandem::DeadmanBackend::agent);
  CHECK_FALSE(dm->arm(1s, rollback(dir)).ok());  // already armed

  REQUIRE(dm->wait_fired(4s));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 1s);  // never early
  // Late by at most the timer's wake-up plus spawning and running the rollback shell; on the 2-core
  // CI machine, next to the fault tests, that alone took 1.27 s once (a 2 s bound failed at 2.27 s).
  CHECK(took < 3s);
  CHECK(fired_count(dir) == 1);
  auto s = status_of(*dm);
  CHECK_FALSE(s.armed);
  CHECK(s.fired);
  CHECK(s.fire_complete);
  CHECK(s.fired_by == "agent");
  REQUIRE(s.outcomes.size() == 1);
  CHECK(s.outcomes[0].exit_code == 0);
  CHECK(s.outcomes[0].status == "exit code 0");
  CHECK(s.outcomes[0].output_tail == "rolled back\n");
  CHECK_FALSE(dm->disarm().ok());  // too late

  // Never twice: not by a restarted agent, not by a late `tandemd deadman-fire`.
  dm.reset();
  auto again = open_dm(dir);
  std::this_thread::sleep_for(100ms);
  auto late = deadman_fire(dir / "deadman");
  REQUIRE(late.ok());
  CHECK_FALSE(late->fired_now);
  CHECK(late->reason.find("already fired") != std::string::npos);
  CHECK(fired_count(dir) == 1);

  // The state file holds what root will run: not world-readable.
  struct stat st {};
  REQUIRE(::stat(deadman_state_path(dir / "deadman").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  // After a completed fire a new bind may arm again.
  CHECK(again->arm(10s, rollback(dir)).ok());
  CHECK(again->disarm().ok());
}

TEST_CASE("dead-man (agent): disarm prevents firing") {
  TempDir dir;
  auto dm = open_dm(dir);
  REQUIRE(dm->arm(500ms, rollback(dir)).ok());
  auto d = dm->disarm();
  REQUIRE(d.ok());
  CHECK_FALSE(d->armed);
  CHECK(dm->disarm().ok());  // a retried disarm is a no-op
  CHECK_FALSE(dm->wait_fired(900ms));
  CHECK(fired_count(dir) == 0);
  auto s = status_of(*dm);
  CHECK_FALSE(s.armed);
  CHECK_FALSE(s.fired);
  auto manual = deadman_fire(dir / "deadman");  // a timer that fires after disarm finds nothing to do
  REQUIRE(manual.ok());
  CHECK_FALSE(manual->fired_now);
  CHECK(fired_count(dir) == 0);
}

TEST_CASE("dead-man (agent): an agent restarted before the deadline still fires on time") {
  TempDir dir;
  auto t0 = std::chrono::steady_clock::now();
  {
    auto dm = open_dm(dir);
    REQUIRE(dm->arm(1200ms, rollback(dir)).ok());
    std::this_thread::sleep_for(200ms);
  }  // agent gone
  std::this_thread::sleep_for(200ms);
  auto dm = open_dm(dir);
  auto s = status_of(*dm);
  CHECK(s.armed);
  CHECK(s.seconds_left == 1);
  REQUIRE(dm->wait_fired(3s));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 1200ms);
  CHECK(took < 2200ms);
  CHECK(fired_count(dir) == 1);
}

TEST_CASE("dead-man (agent): a deadline that passed while the agent was down fires at start") {
  TempDir dir;
  {
    auto dm = open_dm(dir);
    REQUIRE(dm->arm(300ms, rollback(dir)).ok());
  }
  std::this_thread::sleep_for(600ms);
  CHECK(fired_count(dir) == 0);  // nobody was there to fire it
  auto t0 = std::chrono::steady_clock::now();
  auto dm = open_dm(dir);
  REQUIRE(dm->wait_fired(2s));
  CHECK(std::chrono::steady_clock::now() - t0 < 700ms);
  CHECK(fired_count(dir) == 1);
}

TEST_CASE("dead-man: a fire interrupted by a crash is never re-run, and blocks a new arm") {
  TempDir dir;
  const std::string sd = dir / "deadman";
  DeadmanState s;
  s.bind = "glm53";
  s.armed = false;
  s.fired = true;  // written before the commands ran; the agent died during them
  s.fired_by = "agent";
  s.rollback = rollback(dir);
  REQUIRE(save_deadman_state(sd, s).ok());
  auto dm = open_dm(dir);
  std::this_thread::sleep_for(200ms);
  CHECK(fired_count(dir) == 0);
  auto st = status_of(*dm);
  CHECK(st.fired);
  CHECK_FALSE(st.fire_complete);
  CHECK(st.detail.find("interrupted") != std::string::npos);
  auto arm = dm->arm(1s, rollback(dir));
  REQUIRE_FALSE(arm.ok());
  CHECK(arm.error().message.find("has not completed") != std::string::npos);
}

TEST_CASE("dead-man: a rollback command that hangs is killed at its timeout; the next still runs") {
  TempDir dir;
  const std::string sd = dir / "deadman";
  Command hang;
  hang.run = {"/bin/sleep", "30"};
  hang.timeout = 200ms;
  Command missing;
  missing.run = {"/nonexistent/restore-sero.sh"};
  auto cmds = std::vector<Command>{hang, missing};
  for (auto& c : rollback(dir)) cmds.push_back(c);
  DeadmanOptions o;
  o.state_dir = sd;
  o.bind = "b";
  auto dm = Deadman::open(o);
  REQUIRE(dm.ok());
  REQUIRE(dm.value()->arm(10s, cmds).ok());
  auto r = deadman_fire(sd, FireOptions{"systemd", 100ms});  // what the systemd timer runs
  REQUIRE(r.ok());
  CHECK(r->fired_now);
  REQUIRE(r->state.outcomes.size() == 3);
  CHECK(r->state.outcomes[0].timed_out);
  CHECK(r->state.outcomes[0].status.find("signal 15") == 0);
  CHECK(r->state.outcomes[1].status == "not run");
  CHECK(r->state.outcomes[1].error.find("execve") != std::string::npos);
  CHECK(r->state.outcomes[2].exit_code == 0);
  CHECK(fired_count(dir) == 1);
  CHECK(status_of(*dm.value()).fired_by == "systemd");
  CHECK(dm.value()->wait_fired(10ms));
}

TEST_CASE("dead-man (systemd): refused with advice where systemd is not PID 1") {
  if (check_systemd_is_pid1().ok()) return;  // a host with systemd: nothing to refuse
  TempDir dir;
  auto dm = open_dm(dir, tandem::DeadmanBackend::systemd);
  auto r = dm->arm(70min, rollback(dir));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("backend: agent") != std::string::npos);
}

TEST_CASE("dead-man (systemd): transient timer created with systemd-run and stopped on disarm") {
  TempDir dir;
  // Stand-ins for systemd-run/systemctl that record their argv.
  const std::string log = dir / "calls";
  for (const char* tool : {"systemd-run", "systemctl"}) {
    std::ofstream f(dir / tool);
    f << "#!/bin/sh\necho \"" << tool << " $*\" >> " << log << "\necho active\n";
    f.close();
    std::filesystem::permissions(dir / tool, std::filesystem::perms::owner_all);
  }
  DeadmanOptions o;
  o.state_dir = dir / "deadman";
  o.bind = "glm53";
  o.backend = tandem::DeadmanBackend::systemd;
  o.tandemd_path = "/usr/local/sbin/tandemd";
  o.systemd = SystemdTools{dir / "systemd-run", dir / "systemctl"};
  o.skip_pid1_check = true;
  auto dm = Deadman::open(o);
  REQUIRE(dm.ok());
  auto a = dm.value()->arm(70min, rollback(dir));
  REQUIRE_MESSAGE(a.ok(), (a.ok() ? "" : a.error().message));
  CHECK(a->backend == tandem::DeadmanBackend::systemd);
  CHECK(a->seconds_left == 4200);
  std::string calls = slurp(log);
  CHECK(calls.find("systemd-run --unit=tandem-deadman-glm53 ") != std::string::npos);
  CHECK(calls.find("--on-active=4200s --timer-property=AccuracySec=1s /usr/local/sbin/tandemd deadman-fire "
                   "--state-dir " + o.state_dir) != std::string::npos);
  auto s = dm.value()->status();
  REQUIRE(s.ok());
  CHECK(s->detail == "tandem-deadman-glm53.timer: active");
  CHECK(dm.value()->disarm().ok());
  CHECK(slurp(log).find("systemctl stop tandem-deadman-glm53.timer") != std::string::npos);
  CHECK(fired_count(dir) == 0);

  o.bind = "bad name;rm";
  auto bad = Deadman::open(o);
  REQUIRE(bad.ok());
  auto r = bad.value()->arm(1min, rollback(dir));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("bind name") != std::string::npos);
}

namespace {

// Stand-ins for systemd-run/systemctl that append their argv to <dir>/calls; systemd-run exits
// with `run_rc` (a systemd that refuses the unit).
DeadmanOptions fake_systemd(const TempDir& dir, int run_rc = 0) {
  const std::string log = dir / "calls";
  for (const char* tool : {"systemd-run", "systemctl"}) {
    std::ofstream f(dir / tool);
    f << "#!/bin/sh\necho \"" << tool << " $*\" >> " << log << "\n";
    if (std::string(tool) == "systemd-run") f << "exit " << run_rc << "\n";
    else f << "echo active\n";
    f.close();
    std::filesystem::permissions(dir / tool, std::filesystem::perms::owner_all);
  }
  DeadmanOptions o;
  o.state_dir = dir / "deadman";
  o.bind = "glm53";
  o.backend = tandem::DeadmanBackend::systemd;
  o.tandemd_path = "/usr/local/sbin/tandemd";
  o.systemd = SystemdTools{dir / "systemd-run", dir / "systemctl"};
  o.skip_pid1_check = true;
  o.kill_grace = 200ms;
  return o;
}

// What a reboot does to a systemd dead-man: the boot id changes (and the transient timer is gone).
// `deadline_in` moves the wall-clock deadline (negative: it passed while the node was down).
void as_if_rebooted(const std::string& state_dir, std::chrono::milliseconds deadline_in) {
  auto s = load_deadman_state(state_dir);
  REQUIRE(s.ok());
  REQUIRE(s.value().has_value());
  DeadmanState st = *s.value();
  st.boot_id = "00000000-0000-0000-0000-000000000000";
  st.deadline_boot_ns = 0;
  st.deadline_ms = now_unix_ms() + deadline_in.count();
  REQUIRE(save_deadman_state(state_dir, st).ok());
}

}  // namespace

TEST_CASE("dead-man (systemd): after a reboot the agent re-makes the timer for what is left") {
  TempDir dir;
  DeadmanOptions o = fake_systemd(dir);
  {
    auto dm = Deadman::open(o);
    REQUIRE(dm.ok());
    REQUIRE(dm.value()->arm(70min, rollback(dir)).ok());
  }
  SUBCASE("same boot: the timer PID 1 holds is left alone") {
    std::filesystem::remove(dir / "calls");
    auto dm = Deadman::open(o);
    REQUIRE(dm.ok());
    CHECK_FALSE(std::filesystem::exists(dir / "calls"));
    CHECK(status_of(*dm.value()).timer_rearms == 0);
  }
  SUBCASE("rebooted before the deadline: a timer for the rest, the deadline unchanged") {
    as_if_rebooted(o.state_dir, 1500s);
    const auto before = load_deadman_state(o.state_dir).value()->deadline_ms;
    std::filesystem::remove(dir / "calls");
    auto dm = Deadman::open(o);
    REQUIRE(dm.ok());
    const std::string calls = slurp(dir / "calls");
    CHECK(calls.find("systemctl reset-failed tandem-deadman-glm53.service tandem-deadman-glm53.timer") != std::string::npos);
    // 1500 s, give or take the second the test takes.
    const bool rest = calls.find("--on-active=1500s ") != std::string::npos || calls.find("--on-active=1499s ") != std::string::npos;
    CHECK_MESSAGE(rest, calls);
    auto s = load_deadman_state(o.state_dir).value();
    CHECK(s->deadline_ms == before);
    CHECK(s->boot_id == boot_id());
    CHECK(s->timer_rearms == 1);
    CHECK(s->armed);
    auto st = status_of(*dm.value());
    CHECK(st.timer_rearms == 1);
    CHECK(st.seconds_left >= 1498);
    CHECK(st.seconds_left <= 1500);
    // A second start in the same boot does not make another.
    std::filesystem::remove(dir / "calls");
    dm.value().reset();
    auto again = Deadman::open(o);
    REQUIRE(again.ok());
    CHECK_FALSE(std::filesystem::exists(dir / "calls"));
    CHECK(fired_count(dir) == 0);
  }
  SUBCASE("rebooted after the deadline: a timer that fires in a second") {
    as_if_rebooted(o.state_dir, -600s);
    std::filesystem::remove(dir / "calls");
    auto dm = Deadman::open(o);
    REQUIRE(dm.ok());
    CHECK(slurp(dir / "calls").find("--on-active=1s --timer-property=AccuracySec=1s /usr/local/sbin/tandemd deadman-fire") !=
          std::string::npos);
    CHECK(fired_count(dir) == 0);  // the fire is PID 1's, not this agent's
  }
  SUBCASE("disarmed before the reboot: nothing is re-made") {
    {
      auto dm = Deadman::open(o);
      REQUIRE(dm.value()->disarm().ok());
    }
    as_if_rebooted(o.state_dir, 1500s);
    std::filesystem::remove(dir / "calls");
    auto dm = Deadman::open(o);
    REQUIRE(dm.ok());
    CHECK(slurp(dir / "calls").find("systemd-run") == std::string::npos);
  }
}

TEST_CASE("dead-man (systemd): a timer that cannot be re-made after a reboot is kept by the agent") {
  TempDir dir;
  DeadmanOptions o = fake_systemd(dir);
  {
    auto dm = Deadman::open(o);
    REQUIRE(dm.value()->arm(70min, rollback(dir)).ok());
  }
  as_if_rebooted(o.state_dir, 300ms);
  DeadmanOptions broken = fake_systemd(dir, 1);  // systemd-run now fails
  auto dm = Deadman::open(broken);
  REQUIRE(dm.ok());
  auto st = status_of(*dm.value());
  CHECK(st.detail.find("keeps the deadline itself") != std::string::npos);
  REQUIRE(dm.value()->wait_fired(10s));
  CHECK(fired_count(dir) == 1);
  CHECK(status_of(*dm.value()).fired_by == "agent");
}
