#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "sandbox.hpp"
#include "tandem/agent/command.hpp"
#include "tandem/agent/port_probe.hpp"

using namespace tandem::agent;
using sandbox::Sandbox;

namespace {
// /proc/net/tcp lines: 0.0.0.0:8888 (0x22B8) listening (state 0A), or an established socket.
const std::string kHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
const std::string kListen8888 = "   0: 00000000:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n";
const std::string kEstab8888 = "   1: 0100007F:22B8 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n";

tandem::Command cmd(std::vector<std::string> argv, int timeout_ms = 5000) {
  tandem::Command c;
  c.run = std::move(argv);
  c.timeout = std::chrono::milliseconds(timeout_ms);
  return c;
}
}  // namespace

TEST_CASE("command: exit code and output tail; no shell, absolute argv[0] only") {
  auto r = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, std::chrono::seconds(5));
  REQUIRE(r.ok());
  CHECK(r->exit_code == 3);
  CHECK_FALSE(r->success());
  CHECK(r->output_tail == "out\nerr\n");
  auto rel = run_command({"true"}, std::chrono::seconds(5));
  REQUIRE_FALSE(rel.ok());
  CHECK(rel.error().text().find("absolute") != std::string::npos);
  auto missing = run_command({"/nonexistent/bin"}, std::chrono::seconds(5));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().sys_errno == ENOENT);
}

TEST_CASE("command: timeout kills the whole process group") {
  Sandbox sb;
  const auto pidfile = sb.p("/grandchild.pid");
  auto r = run_command({"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile + "; wait"}, std::chrono::milliseconds(400));
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  CHECK(r->signal == SIGKILL);
  CHECK(r->duration_ms < 5000);
  const int gc = std::stoi(sb.read("/grandchild.pid"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Gone, or a zombie waiting for a reaper: either way not sleeping any more.
  std::ifstream in("/proc/" + std::to_string(gc) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK((stat.empty() || stat.find(") Z") != std::string::npos));
}

TEST_CASE("port probe: LISTEN entries in /proc/net/tcp under the root") {
  CHECK(listeners_in_proc_net(kHeader + kListen8888 + kEstab8888, 8888, false) == std::vector<std::string>{"00000000:8888"});
  CHECK(listeners_in_proc_net(kHeader + kEstab8888, 8888, false).empty());
}

TEST_CASE("stop step: runs the declared commands, waits for the port to go dark, reports GPU") {
  Sandbox sb;
  sb.write("/proc/net/tcp", kHeader + kListen8888);
  sb.write("/proc/net/tcp6", kHeader);
  auto opts = sandbox::options(sb);
  opts.stop_commands = std::vector<tandem::Command>{cmd({"/bin/sh", "-c", "echo stopping lane"}), cmd({"/bin/true"})};
  opts.hygiene.port_dark_timeout = std::chrono::seconds(5);
  auto core = sandbox::open_core(opts);

  auto check = core->check("stop");
  REQUIRE(check.ok());
  CHECK((*check)["port"]["dark"] == false);
  CHECK((*check)["port"]["method"] == "proc_net_tcp");

  // The "old lane" lets go of the port a moment after the stop command ran.
  std::thread lane([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    sb.write("/proc/net/tcp.new", kHeader + kEstab8888);  // renamed in: readers never see it half-written
    std::filesystem::rename(sb.p("/proc/net/tcp.new"), sb.p("/proc/net/tcp"));
  });
  auto a = core->apply("stop", "op-stop");
  lane.join();
  REQUIRE_MESSAGE(a.ok(), a.error().text());
  const auto& ev = (*a)["evidence"];
  REQUIRE(ev["commands"].size() == 2);
  CHECK(ev["commands"][0]["exit_code"] == 0);
  CHECK(ev["commands"][0]["output_tail"] == "stopping lane\n");
  CHECK(ev["port"]["dark"] == true);
  CHECK(ev["port"]["waited_ms"].get<int>() > 0);  // it had to poll at least once
  if (!find_executable("nvidia-smi")) {
    CHECK(ev["gpu"]["tool"].is_null());
    CHECK(ev["gpu"]["note"].get<std::string>().find("no GPU tool found") != std::string::npos);
  }
  CHECK(core->verify("op-stop").ok());
  CHECK((*core->undo("op-stop"))["evidence"]["undone"] == false);
}

TEST_CASE("stop step: a port that stays lit and a failing command fail with evidence") {
  Sandbox sb;
  sb.write("/proc/net/tcp", kHeader + kListen8888);
  auto opts = sandbox::options(sb);
  opts.stop_commands = std::vector<tandem::Command>{cmd({"/bin/false"})};
  auto core = sandbox::open_core(opts);
  auto a = core->apply("stop", "op-lit");
  REQUIRE_FALSE(a.ok());
  CHECK(a.error().text().find("1 stop command(s) failed") != std::string::npos);
  CHECK(evidence(a.error())["port"]["dark"] == false);
  CHECK(evidence(a.error())["port"]["listeners"].size() == 1);
  auto replay = core->apply("stop", "op-lit");  // the failure is recorded, not re-run
  REQUIRE_FALSE(replay.ok());
  CHECK(replay.error().text().find("already failed") != std::string::npos);

  opts.stop_commands = std::vector<tandem::Command>{cmd({"bin/relative"})};
  auto core2 = sandbox::open_core(opts);
  auto rel = core2->apply("stop", "op-rel");
  REQUIRE_FALSE(rel.ok());
  CHECK(rel.error().text().find("absolute") != std::string::npos);
}

TEST_CASE("port probe: without /proc/net files under the root, a connect probe is used") {
  Sandbox sb;
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(s, 1) == 0);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  auto root = NodeRoot::open(sb.root, {"/proc/net/tcp", "/proc/net/tcp6"});
  REQUIRE(root.ok());
  auto lit = probe_port(*root, port);
  REQUIRE(lit.ok());
  CHECK(lit->method == "connect");
  CHECK(lit->listening);
  ::close(s);
  auto dark = probe_port(*root, port);
  REQUIRE(dark.ok());
  CHECK_FALSE(dark->listening);
}
