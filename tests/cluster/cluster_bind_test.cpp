// The operator's day across two hosts in network namespaces, driven from the root namespace:
// enroll both hosts over SSH, bind the CPU engine with tensor parallelism 2 (the worker rank in
// namespace B, the head in A, rendezvous over the veth fabric between them), then roll back to the
// old lane. Then the fault: the fabric link is cut (ip link set down) before the ranks meet; the
// bind must fail within the rendezvous timeout and put the old lane back, crontabs byte for byte
// and no rank left running in either namespace. The same for a link cut mid-rendezvous (the worker
// up and waiting, tandemctl stopped there by its fault hook) and under a serving lane (both ranks
// must end on their own within seconds; rollback restores). Last, the fabric cut during the
// bind's stage phase: the bind stops naming the node and the file, nothing lands half-written, and
// the next bind resumes from the last recorded chunk.
#include <arpa/inet.h>
#include <fcntl.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "netns_cluster.hpp"

using namespace tandem::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int kServePort = 18888;

// GET over plain HTTP from the root namespace, through the management link: the status line and
// body, or "" when nothing answered within 3 s.
std::string http_get(const std::string& addr, int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

bool answers(const std::string& addr, int port) { return http_get(addr, port, "/health").starts_with("HTTP/1.1 200"); }

bool wait_answers(const std::string& addr, int port, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (answers(addr, port)) return true;
    std::this_thread::sleep_for(200ms);
  }
  return false;
}

// Engine ranks (tandem-serve started by an agent: they carry --nnodes) running in a namespace.
std::vector<pid_t> ranks_in(const std::string& ns) {
  std::vector<pid_t> out;
  std::istringstream in(run({"/usr/sbin/ip", "netns", "pids", ns}).out);
  for (pid_t pid; in >> pid;) {
    std::string cmd = slurp("/proc/" + std::to_string(pid) + "/cmdline");
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find("tandem-serve") != std::string::npos && cmd.find("--nnodes") != std::string::npos) out.push_back(pid);
  }
  return out;
}

struct BindLab {
  NetnsCluster c;
  fs::path model = c.dir / "model";
  fs::path state = c.dir / "ctl-state";
  std::string crontab;

  // `extra`: more manifest sections (a `stage:`), appended as they are.
  explicit BindLab(const std::string& extra = "") {
    auto m = run({TANDEM_SERVE_BIN, "--write-demo-model", model.string()});
    REQUIRE_MESSAGE(m.status == 0, m.err);
    crontab = "SHELL=/bin/sh\n*/5 * * * * root curl -sf localhost:" + std::to_string(kServePort) +
              "/health || /opt/old/restart.sh\n# keep me\n";
    for (const char* n : {"node-a", "node-b"}) {
      const fs::path r = c.root(n);
      spit(r / "etc/crontab", crontab);
      spit(r / "dev/shm/tandem-test-1", std::string(1000, 'x'));
      spit(r / "proc/meminfo", "MemTotal: 32000000 kB\nMemAvailable: 20000000 kB\n");
      spit(r / "proc/sys/vm/drop_caches", "");
      // The engine and the model are staged by the operator (the manifest pins them), not by enroll.
      fs::create_directories(r / "usr/local/bin");
      std::error_code linked;  // a hard link where it can (same bytes, no copy of a large binary)
      fs::create_hard_link(TANDEM_SERVE_BIN, r / "usr/local/bin/tandem-serve", linked);
      if (linked) fs::copy_file(TANDEM_SERVE_BIN, r / "usr/local/bin/tandem-serve");
      fs::create_directories(r / "models");
      fs::copy(model, r / "models/tiny", fs::copy_options::recursive);
    }
    const std::string a = c.env["A_ADDR"];
    c.write_manifest(
        "netns-bind", 7443,
        "engine:\n  binary: /usr/local/bin/tandem-serve\n  model_dir: /models/tiny\n  run_user: root\n"
        "  cache_dir: /var/cache/tandem\n"
        "  serve: {served_model_name: tiny, host: 0.0.0.0, port: " + std::to_string(kServePort) +
        ", tensor_parallel_size: 2, gpu_memory_utilization: 0.5, device: cpu}\n"
        "  rendezvous: {port: 18521, timeout: 8s}\n"
        "hygiene:\n  cron: {patterns: ['" + std::to_string(kServePort) + "'], systemd_timers: false}\n"
        "  stop:\n    commands:\n      - {on: head, timeout: 1m, run: [/bin/sh, -c, 'kill $(cat " +
        (c.dir / "old.pid").string() + ")']}\n    port_dark_timeout: 10s\n"
        "  shm: {patterns: ['tandem-test-*']}\n  page_cache: {drop: true, min_mem_available: 1GiB}\n"
        "gates: {serve_timeout: 90s, health: false, models: false, chat: false, tool_call: false, json: false}\n"
        "deadman: {delay: 10m, backend: agent}\n"
        "rollback:\n  commands:\n    - {on: head, timeout: 30s, run: [/bin/sh, -c, '" + old_lane() + "']}\n"
        "  verify: {url: 'http://" + a + ":" + std::to_string(kServePort) + "/health', timeout: 60s}\n" + extra);
    auto pki = run({TANDEMCTL_BIN, "pki", "init", c.pki.string(), c.manifest.string()});
    REQUIRE_MESSAGE(pki.status == 0, pki.err);
  }

  // The old lane: one tandem-serve on the head, in namespace A (the rollback command runs it there
  // too, through node A's agent).
  std::string old_lane() const {
    return (c.root("node-a") / "usr/local/bin/tandem-serve").string() + " " + (c.root("node-a") / "models/tiny").string() +
           " --device cpu --host 0.0.0.0 --port " + std::to_string(kServePort) + " > " + (c.dir / "old.log").string() +
           " 2>&1 < /dev/null & echo $! > " + (c.dir / "old.pid").string();
  }
  void start_old_lane() {
    REQUIRE(run({"/usr/sbin/ip", "netns", "exec", c.env["NS_A"], "/bin/sh", "-c", old_lane()}).status == 0);
    REQUIRE_MESSAGE(wait_answers(c.env["A_ADDR"], kServePort, 30s), "the old lane did not come up: " << slurp(c.dir / "old.log"));
  }

  Ran ctl(std::vector<std::string> args) const {
    std::vector<std::string> a{TANDEMCTL_BIN};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), {"--pki-dir", c.pki.string()});
    return run(a, {"SSH_AUTH_SOCK="});
  }
  Ran bind_ctl(const std::string& verb) const {
    return ctl({verb, c.manifest.string(), "--state-dir", state.string()});
  }

  Ran enroll() const {
    return ctl({"enroll", c.manifest.string(), "--known-hosts", c.known_hosts.string(), "--identity", c.key.string(),
                "--agent-binary", TANDEMD_BIN, "--start", "direct", "--timeout", "30"});
  }

  // The plan's index of `action` on `node`.
  int step_index(const std::string& action, const std::string& node) const {
    auto p = run({TANDEMCTL_BIN, "plan", c.manifest.string(), "-o", "json"});
    REQUIRE(p.status == 0);
    const json plan = json::parse(p.out);
    for (const auto& s : plan["steps"])
      if (s["action"] == action && s["node"] == node) return s["index"].get<int>();
    FAIL("no step " << action << " on " << node);
    return 0;
  }

  // `tandemctl bind` in the background, stopped at `point` by tandemctl's fault hook
  // (controller/src/bind/fault_pause.hpp); returns its pid once it waits there.
  pid_t bind_paused_at(const std::string& point) const {
    const fs::path marker = state / "netns-bind/paused", log = c.dir / "paused-bind.log";
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string env = "TANDEM_FAULT_PAUSE=" + point;
      ::putenv(const_cast<char*>(env.c_str()));
      ::unsetenv("SSH_AUTH_SOCK");
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      const std::string m = c.manifest.string(), st = state.string(), pki = c.pki.string();
      ::execl(TANDEMCTL_BIN, TANDEMCTL_BIN, "bind", m.c_str(), "--state-dir", st.c_str(), "--pki-dir", pki.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 3000 && slurp(marker) != point + "\n"; ++i) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) FAIL("tandemctl bind ended before " << point << ":\n" << slurp(log));
      std::this_thread::sleep_for(20ms);
    }
    REQUIRE_MESSAGE(slurp(marker) == point + "\n", slurp(log));
    return pid;
  }
  void resume() const { fs::remove(state / "netns-bind/paused"); }

  void set_fabric(const char* updown) const {
    REQUIRE(run({"/usr/sbin/ip", "-n", c.env.at("NS_A"), "link", "set", "fab0", updown}).status == 0);
  }

  // The old lane back: it answers, crontabs byte for byte, no engine rank in either namespace.
  void require_restored() const {
    CHECK(wait_answers(c.env.at("A_ADDR"), kServePort, 30s));
    CHECK(ranks_in(c.env.at("NS_A")).empty());
    CHECK(ranks_in(c.env.at("NS_B")).empty());
    CHECK(slurp(c.root("node-a") / "etc/crontab") == crontab);
    CHECK(slurp(c.root("node-b") / "etc/crontab") == crontab);
  }
};

int exit_code_of(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Waits until no engine rank runs in `ns`; how long that took, or nullopt after `limit`.
std::optional<std::chrono::milliseconds> ranks_end_in(const std::string& ns, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!ranks_in(ns).empty()) {
    if (std::chrono::steady_clock::now() - t0 > limit) return std::nullopt;
    std::this_thread::sleep_for(100ms);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

}  // namespace

TEST_CASE("enroll, bind TP2 across two namespaces, roll back; then a cut fabric link fails the bind and rolls it back") {
  BindLab lab;
  NetnsCluster& c = lab.c;
  auto enrolled = lab.enroll();
  REQUIRE_MESSAGE(enrolled.status == 0, enrolled.err);
  lab.start_old_lane();

  // The bind: the worker in B, the head in A, meeting over the fabric.
  auto bound = lab.bind_ctl("bind");
  INFO("bind output:\n" << bound.out << bound.err);
  REQUIRE(bound.status == 0);
  CHECK(bound.out.find("serves at http://" + c.env["A_ADDR"] + ":" + std::to_string(kServePort)) != std::string::npos);
  auto head = ranks_in(c.env["NS_A"]);
  auto worker = ranks_in(c.env["NS_B"]);
  REQUIRE(head.size() == 1);
  REQUIRE(worker.size() == 1);
  std::string worker_cmd = slurp("/proc/" + std::to_string(worker[0]) + "/cmdline");
  CHECK(worker_cmd.find(std::string("--master-addr") + '\0' + c.env["A_FABRIC"]) != std::string::npos);
  CHECK(worker_cmd.find(std::string("--headless")) != std::string::npos);
  CHECK(http_get(c.env["A_ADDR"], kServePort, "/v1/models").find("\"tiny\"") != std::string::npos);  // the new lane's served name, not the old lane's
  CHECK(slurp(c.root("node-a") / "etc/crontab") != lab.crontab);  // the cron entry is disabled while bound

  auto rolled = lab.bind_ctl("rollback");
  INFO("rollback output:\n" << rolled.out << rolled.err);
  CHECK(rolled.status == 0);
  CHECK(wait_answers(c.env["A_ADDR"], kServePort, 30s));  // the old lane
  CHECK(ranks_in(c.env["NS_A"]).empty());
  CHECK(ranks_in(c.env["NS_B"]).empty());
  CHECK(slurp(c.root("node-a") / "etc/crontab") == lab.crontab);
  CHECK(slurp(c.root("node-b") / "etc/crontab") == lab.crontab);

  // The fault: the fabric is down when the ranks try to meet.
  REQUIRE(run({"/usr/sbin/ip", "-n", c.env["NS_A"], "link", "set", "fab0", "down"}).status == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto failed = lab.bind_ctl("bind");
  const auto took = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0);
  INFO("faulted bind output (" << took.count() << " s):\n" << failed.out << failed.err);
  CHECK(failed.status == 3);
  CHECK(failed.err.find("(engine.rendezvous) on node-a") != std::string::npos);
  CHECK(failed.err.find("rolled back: the old lane answers again") != std::string::npos);
  CHECK(took < 120s);  // bounded: the rendezvous timeout, not a hang
  CHECK(wait_answers(c.env["A_ADDR"], kServePort, 30s));
  CHECK(ranks_in(c.env["NS_A"]).empty());  // no orphan rank on either side
  CHECK(ranks_in(c.env["NS_B"]).empty());
  CHECK(slurp(c.root("node-a") / "etc/crontab") == lab.crontab);
  CHECK(slurp(c.root("node-b") / "etc/crontab") == lab.crontab);
}

TEST_CASE("the fabric cut mid-rendezvous, and under a serving lane: no rank outlives it, the old lane comes back") {
  BindLab lab;
  NetnsCluster& c = lab.c;
  auto enrolled = lab.enroll();
  REQUIRE_MESSAGE(enrolled.status == 0, enrolled.err);
  lab.start_old_lane();

  // Mid-rendezvous: the worker is up and waiting for its peer on the fabric; the link goes down as
  // the head starts and dials it.
  {
    const pid_t ctl = lab.bind_paused_at("before:" + std::to_string(lab.step_index("engine.start", "node-a")));
    REQUIRE(ranks_in(c.env["NS_B"]).size() == 1);
    lab.set_fabric("down");
    const auto t0 = std::chrono::steady_clock::now();
    lab.resume();
    const int rc = exit_code_of(ctl);
    const auto took = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0);
    const std::string out = slurp(c.dir / "paused-bind.log");
    INFO("bind cut mid-rendezvous (" << took.count() << " s):\n" << out);
    CHECK(rc == 3);
    CHECK(out.find("(engine.rendezvous) on node-a") != std::string::npos);
    CHECK(out.find("rolled back: the old lane answers again") != std::string::npos);
    CHECK(took < 60s);  // the rendezvous bound (8 s) and the rollback, not a hang
    lab.require_restored();
    lab.set_fabric("up");
  }

  // Serving: the bound lane loses its fabric. Both ranks must end on their own within seconds (a
  // lane with half its ranks must not go on answering /health), and rollback restores.
  {
    auto bound = lab.bind_ctl("bind");
    REQUIRE_MESSAGE(bound.status == 0, bound.out << bound.err);
    REQUIRE(ranks_in(c.env["NS_A"]).size() == 1);
    REQUIRE(ranks_in(c.env["NS_B"]).size() == 1);
    lab.set_fabric("down");
    const auto worker = ranks_end_in(c.env["NS_B"], 40s);
    const auto head = ranks_end_in(c.env["NS_A"], 40s);
    CHECK_MESSAGE(worker.has_value(), "the worker rank still runs 40 s after the fabric was cut");
    CHECK_MESSAGE(head.has_value(), "the head rank still runs 40 s after the fabric was cut");
    MESSAGE("after the cut, the worker ended in " << (worker ? worker->count() : -1) << " ms, the head "
                                                  << (head ? head->count() : -1) << " ms later");
    auto rolled = lab.bind_ctl("rollback");
    INFO("rollback:\n" << rolled.out << rolled.err);
    CHECK(rolled.status == 0);
    lab.require_restored();
  }
}

TEST_CASE("the fabric cut during the bind's stage phase: the bind names node and file; the next bind resumes") {
  BindLab lab("stage: {items: [model], chunk: 64KiB, rate_limit: 512KiB}\n");
  NetnsCluster& c = lab.c;
  std::string blob(3 << 20, '\0');
  std::uint32_t x = 2026;
  for (auto& ch : blob) ch = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  spit(c.root("node-a") / "models/tiny/blob.bin", blob);  // only the head has it: the worker pulls it
  auto enrolled = lab.enroll();
  REQUIRE_MESSAGE(enrolled.status == 0, enrolled.err);
  lab.start_old_lane();

  const fs::path partial = c.root("node-b") / "models/tiny/.blob.bin.tandem-partial";
  const fs::path log = c.dir / "stage-cut-bind.log";
  const pid_t ctl = ::fork();
  REQUIRE(ctl >= 0);
  if (ctl == 0) {
    ::unsetenv("SSH_AUTH_SOCK");
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string m = c.manifest.string(), st = lab.state.string(), pki = c.pki.string();
    ::execl(TANDEMCTL_BIN, TANDEMCTL_BIN, "bind", m.c_str(), "--yes", "--state-dir", st.c_str(), "--pki-dir", pki.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto size_of = [](const fs::path& p) {
    std::error_code ec;
    const auto n = fs::file_size(p, ec);
    return ec ? std::uintmax_t{0} : n;
  };
  for (int i = 0; i < 1200 && size_of(partial) < (256 << 10); ++i) std::this_thread::sleep_for(50ms);
  REQUIRE_MESSAGE(size_of(partial) >= (256 << 10), slurp(log));
  for (const char* ns : {"NS_A", "NS_B"}) REQUIRE(run({"/usr/sbin/ip", "-n", c.env[ns], "link", "set", "fab0", "down"}).status == 0);
  const int rc = exit_code_of(ctl);
  const std::string failed = slurp(log);
  INFO("bind with the fabric cut mid-stage:\n" << failed);
  CHECK(rc == 3);
  // The step's node, the file, and the source it could not reach.
  CHECK(failed.find("stage.files") != std::string::npos);
  CHECK(failed.find("node-b") != std::string::npos);
  CHECK(failed.find("/models/tiny/blob.bin") != std::string::npos);
  CHECK(failed.find("head node-a (" + c.env["A_FABRIC"] + ":") != std::string::npos);
  CHECK_FALSE(fs::exists(c.root("node-b") / "models/tiny/blob.bin"));  // nothing half-written in place
  const std::uintmax_t kept = size_of(partial);
  CHECK(kept >= 256u << 10);  // the verified chunks stay beside it through the rollback
  lab.require_restored();

  for (const char* ns : {"NS_A", "NS_B"}) REQUIRE(run({"/usr/sbin/ip", "-n", c.env[ns], "link", "set", "fab0", "up"}).status == 0);
  std::this_thread::sleep_for(1s);
  auto bound = lab.ctl({"bind", c.manifest.string(), "--yes", "--state-dir", lab.state.string(), "-o", "json"});
  INFO("the next bind:\n" << bound.out << bound.err);
  REQUIRE(bound.status == 0);
  const json report = json::parse(slurp(json::parse(bound.out)["report"]["json"].get<std::string>()));
  json ev;
  for (const auto& s : report["steps"])
    if (s["action"] == "stage.files") ev = s["evidence"]["apply"];
  REQUIRE_MESSAGE(ev.is_object(), report.dump(1));
  CHECK(ev["resumed_bytes"].get<std::uint64_t>() >= kept - kept % (64 << 10));
  CHECK(ev["bytes"].get<std::uint64_t>() < 3u << 20);  // the recorded chunks did not cross again
  CHECK(slurp(c.root("node-b") / "models/tiny/blob.bin") == blob);
  auto rolled = lab.bind_ctl("rollback");
  INFO("rollback:\n" << rolled.out << rolled.err);
  CHECK(rolled.status == 0);
  lab.require_restored();
}
