// Stage across the fabric of two network namespaces (netns.sh): the worker's tandemd pulls from
// the head's over the veth pair while the controller drives both over the management links. The
// fault: the fabric is cut mid-file. The stage must fail naming the head, leave the target as it
// was and the recorded chunks beside it, and the next stage (link back) must resume from them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "netns_cluster.hpp"
#include "tandem/net/pki.hpp"

using namespace tandem::test;
using namespace std::chrono_literals;

namespace {

constexpr int kAgentPort = 17443;  // each namespace has its own ports

pid_t spawn(const std::vector<std::string>& argv, const fs::path& log) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, std::chrono::seconds limit) {
  int st = 0;
  for (auto t0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - t0 < limit;) {
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(100ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &st, 0);
  return -1;
}

std::uint64_t size_of(const fs::path& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

}  // namespace

TEST_CASE("stage across the fabric: a cut link fails the stage naming the head; the next one resumes") {
  NetnsCluster c;
  auto& e = c.env;
  std::string blob(4 << 20, '\0');
  std::mt19937 g(9);
  for (auto& ch : blob) ch = static_cast<char>(g());
  spit(c.root("node-a") / "models/m/blob.bin", blob);
  spit(c.root("node-a") / "models/m/config.json", "{}");
  fs::create_directories(c.root("node-b") / "models");
  auto pki = tandem::net::init_cluster_pki(c.pki, "controller", {{"node-a", {e["A_ADDR"]}}, {"node-b", {e["B_ADDR"]}}});
  REQUIRE_MESSAGE(pki.ok(), (pki.ok() ? "" : pki.error().message));
  c.write_manifest("stagecut", kAgentPort,
                   "engine:\n  binary: /bin/true\n  model_dir: /models/m\n  run_user: root\n  cache_dir: /var/cache/t\n"
                   "  serve: {port: 18000, tensor_parallel_size: 2, device: cpu}\n"
                   "gates: {tool_call: false}\ndeadman: {delay: 70m, backend: agent}\n"
                   "rollback:\n  commands: [{on: head, run: [/bin/true]}]\n  verify: {url: 'http://127.0.0.1:18000/health'}\n"
                   "stage: {items: [model], chunk: 64KiB, rate_limit: 512KiB}\n");
  for (const char* n : {"node-a", "node-b"}) {
    const std::string ns = e[n == std::string("node-a") ? "NS_A" : "NS_B"];
    spawn({"/sbin/ip", "netns", "exec", ns, TANDEMD_BIN, "serve", "--node", n, "--listen",
           "0.0.0.0:" + std::to_string(kAgentPort), "--root", c.root(n).string(), "--pki-dir", c.pki.string(),
           "--allow-exec", "/bin/true"},
          c.dir / (std::string(n) + ".log"));
  }
  const std::vector<std::string> stage{TANDEMCTL_BIN, "stage", c.manifest.string(), "-o", "json",
                                       "--state-dir", c.state.string() + "-ctl", "--pki-dir", c.pki.string()};
  // The agents answer once the controller's preflight gets through (tandemctl retries a refused
  // connection briefly); give them a moment first.
  std::this_thread::sleep_for(1500ms);

  const fs::path partial = c.root("node-b") / "models/m/.blob.bin.tandem-partial";
  const pid_t ctl = spawn(stage, c.dir / "stage1.log");
  for (int i = 0; i < 300 && size_of(partial) < (256 << 10); ++i) std::this_thread::sleep_for(50ms);
  REQUIRE_MESSAGE(size_of(partial) >= (256 << 10), slurp(c.dir / "stage1.log") << slurp(c.dir / "node-b.log"));
  for (const char* ns : {"NS_A", "NS_B"}) REQUIRE(run({"/sbin/ip", "-n", e[ns], "link", "set", "fab0", "down"}).status == 0);
  const int rc = wait_exit(ctl, 120s);
  const std::string failed = slurp(c.dir / "stage1.log");
  INFO(failed);
  CHECK(rc == 3);
  CHECK(failed.find("head node-a (" + e["A_FABRIC"] + ":") != std::string::npos);
  const std::uint64_t kept = size_of(partial);
  CHECK(kept >= 256u << 10);
  CHECK_FALSE(fs::exists(c.root("node-b") / "models/m/blob.bin"));  // nothing half-written in place

  for (const char* ns : {"NS_A", "NS_B"}) REQUIRE(run({"/sbin/ip", "-n", e[ns], "link", "set", "fab0", "up"}).status == 0);
  std::this_thread::sleep_for(1s);
  const pid_t again = spawn(stage, c.dir / "stage2.log");
  const int rc2 = wait_exit(again, 120s);
  const std::string out = slurp(c.dir / "stage2.log");
  INFO(out);
  REQUIRE(rc2 == 0);
  auto j = nlohmann::json::parse(out.substr(out.find("{\n")));
  nlohmann::json ev;
  for (const auto& s : j["steps"])
    if (s["action"] == "stage.files") ev = s["evidence"]["apply"];
  CHECK(ev["resumed_bytes"].get<std::uint64_t>() >= kept - kept % (64 << 10));
  CHECK(slurp(c.root("node-b") / "models/m/blob.bin") == blob);
}
