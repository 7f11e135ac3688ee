// tandemd end to end: a real daemon in a sandbox root, a real PKI, the real HTTPS client.
// Covers what an operator relies on: the manifest is checked the same way as by tandemctl, the
// agent only runs allow-listed executables, bad requests change nothing, a hygiene change survives
// kill -9 of the agent and is undone byte for byte afterwards, and the dead-man fires on time
// even when the agent was restarted in between.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "free_port.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

using tandem::test::free_port;

struct Cluster {
  fs::path dir;
  fs::path root;
  fs::path pki;
  std::uint16_t port = 0;
  pid_t pid = -1;
  std::string original_crontab = "SHELL=/bin/sh\r\n*/5 * * * * root curl -sf localhost:8888 || /opt/old/restart.sh\n# keep\n";
  std::string original_crond = "0 3 * * * root /usr/bin/inference-watchdog --port 8888";  // no final newline

  Cluster() {
    dir = fs::temp_directory_path() / ("tandemd-e2e-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    root = dir / "root";
    pki = dir / "pki";
    auto made = tandem::net::init_cluster_pki(pki, "controller", {{"node-a", {"127.0.0.1"}}});
    REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));
    write(root / "etc/crontab", original_crontab);
    write(root / "etc/cron.d/watchdog", original_crond);
    fs::permissions(root / "etc/cron.d/watchdog", fs::perms::owner_read | fs::perms::owner_write);
    write(root / "dev/shm/torch_123", std::string(4096, 'x'));
    write(root / "dev/shm/keep.me", "y");
    write(root / "proc/meminfo", "MemTotal: 32000000 kB\nMemAvailable: 20000000 kB\n");
    write(root / "proc/sys/vm/drop_caches", "");
    // Port 8888 (0x22B8) listening, 29521 (0x7351) only connected: health must list 8888 alone.
    write(root / "proc/net/tcp",
          "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
          "   0: 00000000:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
          "   1: 0100007F:7351 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2\n");
    write(root / "opt/tandem/bin/tandem-serve", "#!/bin/sh\nexit 0\n");
    write(root / "models/m/config.json", "{}");
    port = free_port();
  }
  ~Cluster() {
    stop(SIGKILL);
    fs::remove_all(dir);
  }

  std::string manifest(const std::string& deadman_delay = "2h") const {
    return "apiVersion: tandem/v1\nkind: Bind\nmetadata: {name: e2e}\n"
           "nodes:\n"
           "  - {name: node-a, address: 127.0.0.1, role: head, root: " + root.string() + "}\n"
           "  - {name: node-b, address: 127.0.0.2, role: worker}\n"
           "engine:\n"
           "  binary: /opt/tandem/bin/tandem-serve\n  model_dir: /models/m\n  run_user: root\n"
           "  cache_dir: /var/cache/tandem\n"
           "  serve: {port: 18888, tensor_parallel_size: 2, gpu_memory_utilization: 0.5, device: cpu}\n"
           "  rendezvous: {port: 18521, timeout: 1s}\n"
           "hygiene:\n"
           "  cron: {patterns: ['8888']}\n"
           "  stop: {port_dark_timeout: 1s}\n"
           "  page_cache: {drop: true, min_mem_available: 1GiB}\n"
           "gates: {serve_timeout: 1s, tool_call: false}\n"
           "deadman: {delay: " + deadman_delay + ", backend: agent}\n"
           "rollback:\n"
           "  commands:\n"
           "    - {on: head, run: [/usr/bin/touch, " + (dir / "old-lane-started").string() + "]}\n"
           "  verify: {url: 'http://127.0.0.1:18888/health'}\n";
  }

  void start() {
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string listen = "127.0.0.1:" + std::to_string(port);
      const std::string r = root.string(), p = pki.string();
      ::execl(TANDEMD_BIN, TANDEMD_BIN, "serve", "--node", "node-a", "--root", r.c_str(), "--listen", listen.c_str(),
              "--pki-dir", p.c_str(), "--allow-exec", "/opt/tandem/bin/tandem-serve", "--allow-exec", "/usr/bin/touch",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      auto r = client().get(endpoint(), "/v1/health");
      if (r.ok()) return;
      std::this_thread::sleep_for(50ms);
    }
    FAIL("tandemd did not come up");
  }

  void stop(int sig) {
    if (pid <= 0) return;
    ::kill(pid, sig);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
  }

  tandem::net::Endpoint endpoint() const { return {"127.0.0.1", port, "node-a"}; }

  tandem::net::HttpsClient client(const std::string& cert = "controller") const {
    tandem::net::ClientOptions o;
    tandem::net::PkiLayout l{pki};
    o.ca_file = l.ca_cert();
    o.cert_file = cert == "controller" ? l.controller_cert() : l.node_cert(cert);
    o.key_file = cert == "controller" ? l.controller_key() : l.node_key(cert);
    auto c = tandem::net::HttpsClient::create(o);
    REQUIRE(c.ok());
    return std::move(c.value());
  }

  std::pair<unsigned, json> call(const std::string& method, const std::string& target, const json& body = nullptr) const {
    auto r = client().request(endpoint(), method, target, body.is_null() ? std::string() : body.dump());
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    return {r.value().status, json::parse(r.value().body, nullptr, false)};
  }
};

// `tandemd serve` as Cluster::start runs it, expected to refuse to start: its wait status and output.
std::pair<int, std::string> serve_until_exit(const Cluster& c) {
  const std::string cmd = std::string(TANDEMD_BIN) + " serve --node node-a --root " + c.root.string() +
                          " --listen 127.0.0.1:" + std::to_string(c.port) + " --pki-dir " + c.pki.string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  return {::pclose(p), out};
}

}  // namespace

TEST_CASE("manifests are validated like tandemctl does, and only allow-listed executables are accepted") {
  Cluster c;
  c.start();
  auto [s0, h0] = c.call("GET", "/v1/health");
  CHECK(s0 == 200);
  CHECK(h0["node"] == "node-a");
  CHECK(h0["manifest"].is_null());
  CHECK(h0["facts"]["mem_available_bytes"] == 20000000LL * 1024);
  CHECK(h0["facts"]["listening_tcp_ports"] == json::array({8888}));
  CHECK(h0["engine"]["phase"] == "idle");

  auto [s1, b1] = c.call("PUT", "/v1/manifest", {{"yaml", "apiVersion: tandem/v2\n"}});
  CHECK(s1 == 400);
  CHECK(b1["evidence"]["errors"].size() >= 1);

  std::string m = c.manifest();
  std::string bad_exec = m;
  bad_exec.replace(bad_exec.find("/usr/bin/touch"), 14, "/usr/bin/shred");
  auto [s2, b2] = c.call("PUT", "/v1/manifest", {{"yaml", bad_exec}});
  CHECK(s2 == 403);
  CHECK(b2["evidence"]["refused"] == json::array({"/usr/bin/shred"}));

  auto [s3, b3] = c.call("PUT", "/v1/manifest", {{"yaml", m}});
  CHECK(s3 == 200);
  CHECK(b3["name"] == "e2e");
  CHECK(b3["sha256"].get<std::string>().size() == 64);
}

TEST_CASE("bad requests are answered 4xx and change nothing") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest()}}).first == 200);
  auto raw = c.client().request(c.endpoint(), "POST", "/v1/steps/cron/apply", "{\"op_id\": ");
  REQUIRE(raw.ok());
  CHECK(raw.value().status == 400);
  CHECK(c.call("POST", "/v1/steps/cron/apply", {{"op_id", "../etc"}}).first == 400);
  CHECK(c.call("POST", "/v1/steps/rm-rf/apply", {{"op_id", "x1"}}).first == 404);
  // A number no double holds, a number of the wrong type, invalid UTF-8: 400s that say why.
  auto inf = c.client().request(c.endpoint(), "POST", "/v1/engine/wait-ready", R"({"timeout_s":1e999})");
  REQUIRE(inf.ok());
  CHECK(inf.value().status == 400);
  CHECK(inf.value().body.find("number overflow") != std::string::npos);
  auto [s_type, b_type] = c.call("POST", "/v1/engine/stop", {{"grace_s", "ten"}});
  CHECK(s_type == 400);
  CHECK(b_type["error"] == "'grace_s' must be a number");
  CHECK(c.call("POST", "/v1/engine/wait-ready", {{"timeout_s", -1}}).first == 400);
  CHECK(c.call("GET", "/v1/engine/log?lines=ten").first == 400);
  auto utf = c.client().request(c.endpoint(), "PUT", "/v1/manifest", "{\"yaml\": \"a\xff\"}");
  REQUIRE(utf.ok());
  CHECK(utf.value().status == 400);
  CHECK(json::parse(utf.value().body, nullptr, false).is_object());
  auto big = c.client().request(c.endpoint(), "PUT", "/v1/manifest", std::string(2 << 20, ' '));
  REQUIRE(big.ok());
  CHECK(big.value().status == 413);
  CHECK(slurp(c.root / "etc/crontab") == c.original_crontab);
  CHECK(c.call("GET", "/v1/journal").second["records"].empty());
}

TEST_CASE("tandemd refuses to start with another node's certificate, naming both") {
  Cluster c;
  auto made = tandem::net::init_cluster_pki(c.dir / "pki2", "controller", {{"node-b", {"127.0.0.2"}}});
  REQUIRE(made.ok());
  // node-a's place holds node-b's certificate and key: a copy-paste mistake in enrolment.
  tandem::net::PkiLayout mine{c.pki}, other{c.dir / "pki2"};
  fs::copy_file(other.node_cert("node-b"), mine.node_cert("node-a"), fs::copy_options::overwrite_existing);
  fs::copy_file(other.node_key("node-b"), mine.node_key("node-a"), fs::copy_options::overwrite_existing);
  const auto [status, out] = serve_until_exit(c);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(out.find("the certificate is for 'node-b', not this node 'node-a'") != std::string::npos);
}

TEST_CASE("tandemd refuses to start when its key does not belong to its certificate") {
  Cluster c;
  auto made = tandem::net::init_cluster_pki(c.dir / "pki2", "controller", {{"node-a", {"127.0.0.1"}}});
  REQUIRE(made.ok());
  // The right certificate (CN node-a, our CA) beside the key of another node-a certificate.
  tandem::net::PkiLayout mine{c.pki}, other{c.dir / "pki2"};
  fs::copy_file(other.node_key("node-a"), mine.node_key("node-a"), fs::copy_options::overwrite_existing);
  const auto [status, out] = serve_until_exit(c);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(out.find("node-a.key: the key does not belong to the certificate") != std::string::npos);
}

TEST_CASE("a node certificate cannot drive another agent: only the controller is served") {
  Cluster c;
  c.start();
  // Node certificates carry clientAuth (a worker pulls staged files from the head's agent), so the
  // handshake succeeds; every route but /v1/stage/source/* still answers 403 and runs nothing.
  auto r = c.client("node-a").get(c.endpoint(), "/v1/health");
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(r->status == 403);
  CHECK(r->body.find("client 'node-a' is not allowed here") != std::string::npos);
  auto put = c.client("node-a").request(c.endpoint(), "PUT", "/v1/manifest", nlohmann::json{{"yaml", c.manifest()}}.dump());
  REQUIRE(put.ok());
  CHECK(put->status == 403);
  // Nor push stage chunks (stage.from: controller): those routes are the controller's alone.
  auto chunk = c.client("node-a").request(c.endpoint(), "PUT", "/v1/stage/push/chunk?id=1", "bytes");
  REQUIRE(chunk.ok());
  CHECK(chunk->status == 403);
}

TEST_CASE("stage push routes: large chunks reach the handler, which takes only what a stage asked for") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest()}}).first == 200);
  // 2 MiB: over the 1 MiB limit of every other route, under the push routes' 65 MiB.
  auto big = c.client().request(c.endpoint(), "PUT", "/v1/stage/push/chunk?id=7", std::string(2 << 20, 'x'));
  REQUIRE(big.ok());
  CHECK(big->status == 409);
  CHECK(big->body.find("no reader waits for pushed chunk 7") != std::string::npos);
  auto [st, body] = c.call("POST", "/v1/stage/push/take", {{"wait_ms", 0}});
  CHECK(st == 200);
  CHECK(body["want"].is_null());
  CHECK(c.call("POST", "/v1/stage/push/take", {{"wait_ms", 60000}}).first == 400);
  // This manifest has no stage section: a pushed listing is refused.
  auto [ls, lb] = c.call("PUT", "/v1/stage/push/listing", {{"entries", nlohmann::json::array()}});
  CHECK(ls == 409);
  CHECK(lb["error"].get<std::string>().find("does not stage from the controller") != std::string::npos);
}

TEST_CASE("cron disabled over HTTPS survives kill -9 of the agent and is undone byte for byte") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest()}}).first == 200);
  auto [sc, check] = c.call("GET", "/v1/steps/cron");
  CHECK(sc == 200);
  auto [sa, applied] = c.call("POST", "/v1/steps/cron/apply", {{"op_id", "bind1-cron"}});
  REQUIRE(sa == 200);
  CHECK(applied["evidence"]["lines_disabled"] == 2);
  CHECK(slurp(c.root / "etc/crontab").find("#tandem-disabled op=bind1-cron#") != std::string::npos);
  // A retried request is not applied twice.
  auto [sr, again] = c.call("POST", "/v1/steps/cron/apply", {{"op_id", "bind1-cron"}});
  CHECK(sr == 200);
  CHECK(again["replayed"] == true);

  c.stop(SIGKILL);  // between apply and verify
  c.start();        // the manifest and the journal come back from the state dir
  auto [sh, health] = c.call("GET", "/v1/health");
  CHECK(health["manifest"]["name"] == "e2e");
  auto [su, undone] = c.call("POST", "/v1/undo-incomplete");
  CHECK(su == 200);
  CHECK(slurp(c.root / "etc/crontab") == c.original_crontab);
  CHECK(slurp(c.root / "etc/cron.d/watchdog") == c.original_crond);
  CHECK((fs::status(c.root / "etc/cron.d/watchdog").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("hygiene steps over HTTPS report evidence: shm, page cache, cache dir, sha") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest()}}).first == 200);
  auto [s1, shm] = c.call("POST", "/v1/steps/shm/apply", {{"op_id", "b-shm"}});
  CHECK(s1 == 200);
  CHECK(shm["evidence"]["count"] == 1);
  CHECK(shm["evidence"]["bytes_freed"] == 4096);
  CHECK(fs::exists(c.root / "dev/shm/keep.me"));
  auto [s2, pc] = c.call("POST", "/v1/steps/page_cache/apply", {{"op_id", "b-pc"}});
  CHECK(s2 == 200);
  CHECK(slurp(c.root / "proc/sys/vm/drop_caches") == "3");
  auto [s3, cd] = c.call("POST", "/v1/steps/cache_dir/apply", {{"op_id", "b-cd"}});
  CHECK(s3 == 200);
  CHECK(fs::is_directory(c.root / "var/cache/tandem"));
  auto [s4, sha] = c.call("POST", "/v1/steps/sha/apply", {{"op_id", "b-sha"}});
  CHECK(s4 == 200);
  CHECK(sha["evidence"]["files"].contains("/opt/tandem/bin/tandem-serve"));
  // Too little memory: the step fails with both numbers and the evidence.
  write(c.root / "proc/meminfo", "MemTotal: 32000000 kB\nMemAvailable: 500000 kB\n");
  auto [s5, low] = c.call("POST", "/v1/steps/page_cache/apply", {{"op_id", "b-pc2"}});
  CHECK(s5 == 422);
  CHECK(low["error"].get<std::string>().find("below the required 1 GiB") != std::string::npos);
}

TEST_CASE("the dead-man fires on time across an agent restart: node restored, old lane started") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest("4s")}}).first == 200);
  REQUIRE(c.call("POST", "/v1/steps/cron/apply", {{"op_id", "d-cron"}}).first == 200);
  auto [sa, armed] = c.call("POST", "/v1/deadman/arm", {{"op_id", "d-arm"}});
  REQUIRE(sa == 200);
  CHECK(armed["deadman"]["armed"] == true);
  const auto t0 = std::chrono::steady_clock::now();
  c.stop(SIGKILL);
  std::this_thread::sleep_for(1s);
  c.start();
  // Not yet: the deadline is 4 s after arming.
  CHECK_FALSE(fs::exists(c.dir / "old-lane-started"));
  while (!fs::exists(c.dir / "old-lane-started") && std::chrono::steady_clock::now() - t0 < 15s)
    std::this_thread::sleep_for(100ms);
  const auto fired_after = std::chrono::steady_clock::now() - t0;
  CHECK(fs::exists(c.dir / "old-lane-started"));
  CHECK(fired_after >= 3800ms);
  CHECK(fired_after < 8s);
  // The restore command ran first: crontabs are back byte for byte.
  for (int i = 0; i < 50 && slurp(c.root / "etc/crontab") != c.original_crontab; ++i) std::this_thread::sleep_for(100ms);
  CHECK(slurp(c.root / "etc/crontab") == c.original_crontab);
  auto [ss, st] = c.call("GET", "/v1/deadman");
  CHECK(st["deadman"]["fired"] == true);
  CHECK(st["deadman"]["outcomes"].size() == 2);
  // Disarming after it fired is refused: the rollback cannot be called back.
  CHECK(c.call("POST", "/v1/deadman/disarm", {{"op_id", "d-dis"}}).first == 409);
}

TEST_CASE("a disarmed dead-man never fires") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest("3500ms")}}).first == 200);
  REQUIRE(c.call("POST", "/v1/deadman/arm", {{"op_id", "n-arm"}}).first == 200);
  auto [sd, dis] = c.call("POST", "/v1/deadman/disarm", {{"op_id", "n-dis"}});
  CHECK(sd == 200);
  CHECK(dis["deadman"]["armed"] == false);
  std::this_thread::sleep_for(4500ms);
  CHECK_FALSE(fs::exists(c.dir / "old-lane-started"));
}

TEST_CASE("rollback/start runs this node's rollback commands once per op id, and never after the dead-man ran them") {
  Cluster c;
  c.start();
  REQUIRE(c.call("PUT", "/v1/manifest", {{"yaml", c.manifest("4s")}}).first == 200);
  auto [s1, r1] = c.call("POST", "/v1/rollback/start", {{"op_id", "rb-1"}});
  CHECK(s1 == 200);
  CHECK(r1["ran_by"] == "tandemd");
  CHECK(r1["outcomes"].size() == 1);
  CHECK(r1["outcomes"][0]["exit_code"] == 0);
  CHECK(fs::exists(c.dir / "old-lane-started"));
  fs::remove(c.dir / "old-lane-started");
  auto [s2, r2] = c.call("POST", "/v1/rollback/start", {{"op_id", "rb-1"}});  // a retry: replayed, not rerun
  CHECK(s2 == 200);
  CHECK(r2["replayed"] == true);
  CHECK_FALSE(fs::exists(c.dir / "old-lane-started"));

  REQUIRE(c.call("POST", "/v1/deadman/arm", {{"op_id", "rb-arm"}}).first == 200);
  for (int i = 0; i < 100 && !fs::exists(c.dir / "old-lane-started"); ++i) std::this_thread::sleep_for(100ms);
  REQUIRE(fs::exists(c.dir / "old-lane-started"));  // the dead-man fired and ran them
  for (int i = 0; i < 50 && c.call("GET", "/v1/deadman").second["deadman"]["fire_complete"] != true; ++i)
    std::this_thread::sleep_for(100ms);
  fs::remove(c.dir / "old-lane-started");
  auto [s3, r3] = c.call("POST", "/v1/rollback/start", {{"op_id", "rb-2"}});
  CHECK(s3 == 200);
  CHECK(r3["ran_by"].get<std::string>().find("dead-man") == 0);
  CHECK_FALSE(fs::exists(c.dir / "old-lane-started"));
}

TEST_CASE("command gates: only the manifest's argv, only on the nodes it names, outcome returned; others refused") {
  Cluster c;
  c.start();
  const std::string marker = (c.dir / "gate-ran").string();
  auto with_gates = [&](const std::string& custom) {
    std::string m = c.manifest();
    const std::string from = "gates: {serve_timeout: 1s, tool_call: false}\n";
    m.replace(m.find(from), from.size(), "gates:\n  serve_timeout: 1s\n  tool_call: false\n  custom:\n" + custom);
    return m;
  };
  const std::string gates = "    - name: touch-here\n      command: {on: head, run: [/usr/bin/touch, " + marker + "], timeout: 10s}\n"
                            "    - name: on-worker\n      command: {on: worker, run: [/usr/bin/touch, " + marker + "]}\n"
                            "    - name: http-one\n      http: {url: /health}\n";
  auto [sm, rm] = c.call("PUT", "/v1/manifest", {{"yaml", with_gates(gates)}});
  INFO(rm.dump());
  REQUIRE(sm == 200);

  auto [s1, r1] = c.call("POST", "/v1/gates/run", {{"gate", "touch-here"}});
  CHECK(s1 == 200);
  CHECK(r1["outcome"]["exit_code"] == 0);
  CHECK(r1["outcome"]["timed_out"] == false);
  CHECK(r1["outcome"]["argv"] == json::array({"/usr/bin/touch", marker}));
  CHECK(fs::exists(marker));
  fs::remove(marker);

  CHECK(c.call("POST", "/v1/gates/run", {{"gate", "on-worker"}}).first == 409);  // not this node's
  CHECK(c.call("POST", "/v1/gates/run", {{"gate", "http-one"}}).first == 404);   // not a command gate
  CHECK(c.call("POST", "/v1/gates/run", {{"gate", "nope"}}).first == 404);
  CHECK(c.call("POST", "/v1/gates/run", {{"name", "touch-here"}}).first == 400);
  CHECK_FALSE(fs::exists(marker));

  // An executable the operator did not allow at enrolment is refused with the manifest.
  auto [s2, r2] = c.call("PUT", "/v1/manifest", {{"yaml", with_gates("    - name: sh\n      command: {on: head, run: [/bin/sh, -c, id]}\n")}});
  CHECK(s2 == 403);
  CHECK(r2.dump().find("/bin/sh") != std::string::npos);
}
