#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "tandem/supervise/proc_stat.hpp"
#include "tandem/supervise/rank_supervisor.hpp"
#include "test_util.hpp"

using namespace tandem::supervise;
using namespace tandem::supervise::test;
using namespace std::chrono_literals;

namespace {

// The stand-in rank: listens on `port` after `delay_ms`; exits with `code` after `exit_ms` (-1: never).
RankSpec listener(const TempDir& dir, int port, int delay_ms, int exit_ms = -1, int code = 0, bool ignore_term = false) {
  RankSpec s;
  s.argv = {TANDEM_TEST_LISTENER, std::to_string(port), std::to_string(delay_ms)};
  if (exit_ms >= 0) {
    s.argv.push_back(std::to_string(exit_ms));
    s.argv.push_back(std::to_string(code));
  }
  if (ignore_term) s.argv.emplace_back("--ignore-term");
  s.log_path = dir / "rank.log";
  s.ready_host = "127.0.0.1";
  s.ready_port = port;
  return s;
}

std::unique_ptr<RankSupervisor> open_sup(const std::string& dir) {
  auto r = RankSupervisor::open(dir);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  return std::move(r).value();
}

}  // namespace

TEST_CASE("rank: ready when its port accepts; stop sends TERM; log tail") {
  TempDir dir;
  auto sup = open_sup(dir.path);
  CHECK(sup->status().phase == RankPhase::idle);
  const int port = free_port();
  auto t0 = std::chrono::steady_clock::now();
  auto st = sup->start(listener(dir, port, 300));
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().message));
  CHECK(st->phase == RankPhase::starting);
  CHECK(st->pgid == st->pid);
  CHECK(std::filesystem::exists(rank_record_path(dir.path)));
  CHECK_FALSE(sup->start(listener(dir, port, 0)).ok());  // one rank at a time

  auto ready = sup->wait_ready(5s);
  REQUIRE_MESSAGE(ready.ok(), (ready.ok() ? "" : ready.error().message));
  CHECK(ready->phase == RankPhase::ready);
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);

  auto tail = sup->tail(1);
  REQUIRE(tail.ok());
  REQUIRE(tail->size() == 1);
  CHECK(tail->front() == "listener: listening on " + std::to_string(port));
  auto all = sup->tail(10);
  REQUIRE(all.ok());
  CHECK(all->size() == 2);

  auto stopped = sup->stop(2s);
  REQUIRE_MESSAGE(stopped.ok(), (stopped.ok() ? "" : stopped.error().message));
  CHECK(stopped->phase == RankPhase::exited);
  CHECK(stopped->stop_requested);
  REQUIRE(stopped->exit);
  CHECK(stopped->exit->signal == SIGTERM);
  CHECK_FALSE(std::filesystem::exists(rank_record_path(dir.path)));
  CHECK(sup->stop(1s).ok());  // nothing running: not an error
}

TEST_CASE("rank: not ready in time is an error; a TERM-ignoring rank is KILLed after the grace") {
  TempDir dir;
  auto sup = open_sup(dir.path);
  const int port = free_port();
  REQUIRE(sup->start(listener(dir, port, 60000, -1, 0, true)).ok());
  auto ready = sup->wait_ready(300ms);
  REQUIRE_FALSE(ready.ok());
  CHECK(ready.error().message.find("did not accept a connection within") != std::string::npos);
  auto stopped = sup->stop(200ms);
  REQUIRE(stopped.ok());
  REQUIRE(stopped->exit);
  CHECK(stopped->exit->signal == SIGKILL);
}

TEST_CASE("rank: dying before ready fails wait_ready at once, with the exit status and log tail") {
  TempDir dir;
  auto sup = open_sup(dir.path);
  REQUIRE(sup->start(listener(dir, free_port(), 60000, 200, 3)).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto ready = sup->wait_ready(10s);
  REQUIRE_FALSE(ready.ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(ready.error().message.find("exit code 3") != std::string::npos);
  CHECK(ready.error().message.find("listener: exiting with 3") != std::string::npos);
}

TEST_CASE("rank: an unexpected exit is noticed promptly and reported") {
  TempDir dir;
  auto sup = open_sup(dir.path);
  std::atomic<bool> called{false};
  std::atomic<long long> noticed_ms{0};
  auto t0 = std::chrono::steady_clock::now();
  sup->on_exit([&](const RankStatus& s) {
    noticed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    CHECK(s.phase == RankPhase::exited);
    called = true;
  });
  const int port = free_port();
  REQUIRE(sup->start(listener(dir, port, 0, 500, 4)).ok());
  REQUIRE(sup->wait_ready(3s).ok());
  auto s = sup->wait_exit(5s);
  CHECK(s.phase == RankPhase::exited);
  REQUIRE(s.exit);
  CHECK(s.exit->code == 4);
  CHECK_FALSE(s.stop_requested);
  for (int i = 0; i < 100 && !called; ++i) std::this_thread::sleep_for(10ms);
  CHECK(called);
  CHECK(noticed_ms >= 500);
  CHECK(noticed_ms < 1200);  // the reaper polls every 20 ms; slack for busy machines
  CHECK_FALSE(std::filesystem::exists(rank_record_path(dir.path)));
}

TEST_CASE("rank: a new supervisor finds the rank a crashed one left behind and stops it") {
  TempDir dir;
  const int port = free_port();
  pid_t pid = -1;
  {
    auto first = open_sup(dir.path);
    auto st = first->start(listener(dir, port, 0));
    REQUIRE(st.ok());
    pid = st->pid;
    REQUIRE(first->wait_ready(3s).ok());
  }  // "crash": destroyed without stop()
  auto s0 = read_proc_stat(pid);
  REQUIRE(s0);
  CHECK(s0->state != 'Z');

  auto second = open_sup(dir.path);
  auto st = second->status();
  CHECK(st.phase == RankPhase::adopted);
  CHECK(st.pid == pid);
  CHECK(st.log_path == dir / "rank.log");
  CHECK(second->wait_ready(1s).ok());  // the port it recorded still answers
  CHECK_FALSE(second->start(listener(dir, port, 0)).ok());  // the orphan must go first
  auto stopped = second->stop(2s);
  REQUIRE_MESSAGE(stopped.ok(), (stopped.ok() ? "" : stopped.error().message));
  CHECK(stopped->phase == RankPhase::exited);
  CHECK(stopped->exit->kind == ExitStatus::Kind::unknown);  // not its child: no wait status
  CHECK_FALSE(same_process_alive(pid, s0->start_ticks));
  CHECK_FALSE(std::filesystem::exists(rank_record_path(dir.path)));
  CHECK(open_sup(dir.path)->status().phase == RankPhase::idle);
}

TEST_CASE("rank: a record whose pid now names another process is stale and never signalled") {
  TempDir dir;
  auto me = read_proc_stat(::getpid());
  REQUIRE(me);
  RankRecord rec;
  rec.pid = ::getpid();  // alive, but started at another time than recorded: pid reuse
  rec.pgid = ::getpgrp();
  rec.start_ticks = me->start_ticks + 12345;
  rec.boot_id = boot_id();
  REQUIRE(save_rank_record(dir.path, rec).ok());
  auto sup = open_sup(dir.path);
  CHECK(sup->status().phase == RankPhase::idle);
  CHECK_FALSE(std::filesystem::exists(rank_record_path(dir.path)));
}

TEST_CASE("rank spec from a manifest: head probes its HTTP port, worker its rendezvous port") {
  tandem::Manifest m;
  m.name = "t";
  tandem::Node head;
  head.name = "spark1";
  head.address = head.fabric_address = "10.0.0.1";
  head.role = tandem::Role::head;
  tandem::Node worker = head;
  worker.name = "spark2";
  worker.address = worker.fabric_address = "10.0.0.2";
  worker.role = tandem::Role::worker;
  m.nodes = {head, worker};
  m.engine.binary = "/opt/tandem/bin/tandem-serve";
  m.engine.model_dir = "/models/t";
  m.engine.run_user = "nobody";
  m.engine.serve.port = 8888;
  m.engine.rendezvous.port = 29521;
  auto h = RankSpec::from_manifest(m, m.nodes[0], "/var/log/h.log");
  CHECK(h.argv.front() == "/opt/tandem/bin/tandem-serve");
  CHECK(h.ready_port == 8888);
  CHECK(h.ready_host == "127.0.0.1");
  CHECK(h.run_user == "nobody");
  auto w = RankSpec::from_manifest(m, m.nodes[1], "/var/log/w.log");
  CHECK(w.ready_port == 8888);  // the headless worker's /health, on its fabric address
  CHECK(w.ready_host == "10.0.0.2");
  CHECK(std::find(w.argv.begin(), w.argv.end(), "--headless") != w.argv.end());
}
