// tandemctl enroll against real OpenSSH servers on loopback, with a real tandemd started by it and
// checked over mutual TLS. Each case is what an operator relies on: files land with the right
// modes and bytes, the agent answers, an unknown host is refused until accepted, a changed host
// key and a wrong login key are refused before anything is sent, and a copy that differs on the
// node is caught before it is installed.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "free_port.hpp"
#include "sshd_fixture.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"

using namespace tandem::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

void skip_without_sshd() {
  auto why = sshd_unavailable();
  if (!why && ::geteuid() != 0) why = "these tests run sshd as root and log in as root (uid is " + std::to_string(::geteuid()) + ")";
  if (why) {
    MESSAGE("skipped: " << *why);
    std::exit(77);
  }
}

// A bind with two nodes on 127.0.0.1 and 127.0.0.2, each with its own sandbox root.
struct Lab {
  fs::path dir;
  fs::path key, pki, known_hosts, manifest;
  std::vector<std::unique_ptr<Sshd>> sshd;  // [0]: node-a, [1]: node-b (when started)
  int agent_port = 0;

  explicit Lab(int nodes = 1, SshdOptions a = {}) {
    skip_without_sshd();
    char tmpl[] = "/tmp/tandem-enroll-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    key = dir / "id_ed25519";
    make_key(key);
    pki = dir / "pki";
    known_hosts = dir / "known_hosts";
    a.address = "127.0.0.1";
    sshd.push_back(std::make_unique<Sshd>(dir / "sshd-a", a));
    if (nodes > 1) sshd.push_back(std::make_unique<Sshd>(dir / "sshd-b", SshdOptions{"127.0.0.2", "", ""}));
    for (auto& s : sshd) s->authorize(key.string() + ".pub");
    agent_port = tandem::test::free_port("0.0.0.0");  // free on both nodes' addresses
    write_manifest();
    auto made = tandem::net::init_cluster_pki(pki, "controller", {{"node-a", {"127.0.0.1"}}, {"node-b", {"127.0.0.2"}}});
    REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));
  }
  ~Lab() {
    for (const char* n : {"node-a", "node-b"}) stop_agent(n);
    sshd.clear();
    fs::remove_all(dir);
  }

  fs::path root(const std::string& node) const { return dir / ("root-" + node); }
  int ssh_port(std::size_t i) const { return i < sshd.size() ? sshd[i]->port() : 1; }

  void write_manifest() {
    manifest = dir / "m.yaml";
    auto node = [&](const std::string& name, const std::string& addr, const std::string& role, int port) {
      return "  - name: " + name + "\n    address: " + addr + "\n    role: " + role + "\n    ssh: {user: root, port: " +
             std::to_string(port) + "}\n    agent: {port: " + std::to_string(agent_port) + "}\n    root: " +
             root(name).string() + "\n";
    };
    spit(manifest, "apiVersion: tandem/v1\nkind: Bind\nmetadata: {name: enroll-test}\nnodes:\n" +
                       node("node-a", "127.0.0.1", "head", ssh_port(0)) + node("node-b", "127.0.0.2", "worker", ssh_port(1)) +
                       "engine:\n  binary: /opt/tandem/bin/tandem-serve\n  model_dir: /models/m\n  run_user: root\n"
                       "  cache_dir: /var/cache/tandem\n"
                       "  serve: {port: 18888, tensor_parallel_size: 2, gpu_memory_utilization: 0.5, device: cpu}\n"
                       "hygiene:\n  stop:\n    commands:\n      - {on: worker, run: [/usr/bin/pkill, -f, old-lane]}\n"
                       "rollback:\n  commands:\n    - {on: head, run: [/usr/bin/touch, /tmp/old-lane]}\n"
                       "  verify: {url: 'http://127.0.0.1:18888/health'}\n"
                       "gates: {tool_call: false}\ndeadman: {delay: 2h, backend: agent}\n");
  }

  void trust_all() {
    std::string lines;
    for (auto& s : sshd) lines += s->known_hosts_line();
    spit(known_hosts, lines);
  }

  Ran enroll(std::vector<std::string> extra, std::vector<std::string> env = {"SSH_AUTH_SOCK="}) {
    std::vector<std::string> argv{TANDEMCTL_BIN, "enroll", manifest.string(), "--pki-dir", pki.string(), "--known-hosts",
                                  known_hosts.string(), "--agent-binary", TANDEMD_BIN, "--start", "direct",
                                  "--ssh-timeout", "5"};
    if (std::find(extra.begin(), extra.end(), "--timeout") == extra.end()) extra.insert(extra.end(), {"--timeout", "20"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, env);
  }

  pid_t agent_pid(const std::string& node) const {
    std::string s = slurp(root(node) / "var/lib/tandem/tandemd.pid");
    return s.empty() ? -1 : static_cast<pid_t>(std::stol(s));
  }
  // The agent was started by sshd's session, not by us: signal it and wait for /proc to say so.
  void stop_agent(const std::string& node) const {
    pid_t pid = agent_pid(node);
    if (pid <= 0 || ::kill(pid, SIGTERM) != 0) return;
    for (int i = 0; i < 100 && alive(pid); ++i) std::this_thread::sleep_for(50ms);
    if (alive(pid)) ::kill(pid, SIGKILL);
  }
  static bool alive(pid_t pid) {
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return false;
    auto close = stat.rfind(')');
    return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
  }

  tandem::Result<tandem::net::ClientResponse> health(const std::string& node, const std::string& addr) const {
    tandem::net::PkiLayout l{pki};
    tandem::net::ClientOptions o;
    o.ca_file = l.ca_cert();
    o.cert_file = l.controller_cert();
    o.key_file = l.controller_key();
    auto c = tandem::net::HttpsClient::create(o);
    REQUIRE(c.ok());
    return c.value().get({addr, static_cast<std::uint16_t>(agent_port), node}, "/v1/health");
  }
};

json parse(const std::string& s) { return json::parse(s, nullptr, false); }

}  // namespace

// long-function: one end-to-end enroll scenario: files, modes and bytes, keys kept home, then the agent answers.
TEST_CASE("enroll installs tandemd with its certificates on both nodes, verifies every file and proves the agent answers") {
  Lab lab(2);
  lab.trust_all();
  auto r = lab.enroll({"--identity", lab.key.string(), "-o", "json"});
  REQUIRE_MESSAGE(r.status == 0, r.err);
  json j = parse(r.out);
  REQUIRE(j.is_object());
  CHECK(j["ok"] == true);
  REQUIRE(j["nodes"].size() == 2);

  tandem::net::PkiLayout pki{lab.pki};
  for (const auto& [name, addr] : {std::pair{"node-a", "127.0.0.1"}, std::pair{"node-b", "127.0.0.2"}}) {
    CAPTURE(name);
    const fs::path root = lab.root(name);
    // What lands where, with which mode, byte for byte.
    const std::vector<std::tuple<fs::path, unsigned, fs::path>> expected{
        {root / "usr/local/sbin/tandemd", 0755, TANDEMD_BIN},
        {root / "etc/tandem/pki/ca.pem", 0644, pki.ca_cert()},
        {root / "etc/tandem/pki/nodes" / (std::string(name) + ".pem"), 0644, pki.node_cert(name)},
        {root / "etc/tandem/pki/nodes" / (std::string(name) + ".key"), 0600, pki.node_key(name)},
        {root / "etc/systemd/system/tandemd.service", 0644, fs::path(TANDEM_SOURCE_DIR) / "deploy/systemd/tandemd.service"},
    };
    for (const auto& [remote, mode, local] : expected) {
      CAPTURE(remote);
      CHECK(mode_of(remote) == mode);
      CHECK(slurp(remote) == slurp(local));
    }
    // The node's CA key and the controller's key never leave the controller.
    CHECK_FALSE(fs::exists(root / "etc/tandem/pki/ca.key"));
    CHECK_FALSE(fs::exists(root / "etc/tandem/pki/controller.key"));
    const std::string env = slurp(root / "etc/tandem/tandemd.env");
    CHECK(mode_of(root / "etc/tandem/tandemd.env") == 0640);
    CHECK(has(env, std::string("TANDEMD_NODE=") + name + "\n"));
    CHECK(has(env, std::string("TANDEMD_LISTEN=") + addr + ":" + std::to_string(lab.agent_port) + "\n"));
    // Allow-list: the engine, plus this node's stop (worker) or rollback (head) command only.
    CHECK(has(env, "--allow-exec /opt/tandem/bin/tandem-serve"));
    CHECK(has(env, "--allow-exec /usr/bin/pkill") == (std::string(name) == "node-b"));
    CHECK(has(env, "--allow-exec /usr/bin/touch") == (std::string(name) == "node-a"));
    for (const auto& e : fs::recursive_directory_iterator(root))
      CHECK_MESSAGE(e.path().string().find(".tandem-new") == std::string::npos, e.path());

    // The report's hashes are the node's own sha256sum answers, and equal to what was sent.
    const json* node = nullptr;
    for (const auto& n : j["nodes"])
      if (n["node"] == name) node = &n;
    REQUIRE(node);
    CHECK((*node)["ok"] == true);
    CHECK((*node)["files"].size() == 6);
    for (const auto& f : (*node)["files"]) {
      CHECK(f["sha256"].get<std::string>().size() == 64);
      CHECK(f["sha256"] == f["remote_sha256"]);
    }

    // Independently of enroll: the agent answers our controller certificate, as this node.
    auto h = lab.health(name, addr);
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.error().message));
    CHECK(h.value().status == 200);
    auto hj = parse(h.value().body);
    CHECK(hj["node"] == name);
    CHECK(hj["root"] == root.string());
  }
  // No key material in what tandemctl prints: the middle line of each key's PEM body.
  for (const char* name : {"node-a", "node-b"}) {
    std::string keypem = slurp(pki.node_key(name));
    std::string body_line = keypem.substr(keypem.find('\n') + 1, 40);
    CHECK_FALSE(has(r.out + r.err, body_line));
  }

  // Enrolling again replaces the running agent with the new one.
  const pid_t before = lab.agent_pid("node-a");
  REQUIRE(Lab::alive(before));
  auto again = lab.enroll({"--identity", lab.key.string(), "--node", "node-a"});
  REQUIRE_MESSAGE(again.status == 0, again.err);
  CHECK(has(again.out, "node-a: enrolled"));
  const pid_t after = lab.agent_pid("node-a");
  CHECK(after != before);
  CHECK_FALSE(Lab::alive(before));
  CHECK(Lab::alive(after));
  auto h = lab.health("node-a", "127.0.0.1");
  CHECK((h.ok() && h.value().status == 200));

  // With its pid file lost, the old agent keeps the port and the new one cannot listen: the old
  // one's answer must not pass for the new agent's.
  fs::remove(lab.root("node-a") / "var/lib/tandem/tandemd.pid");
  auto blocked = lab.enroll({"--identity", lab.key.string(), "--node", "node-a", "--timeout", "3"});
  CHECK(blocked.status == 3);
  CHECK(has(blocked.err, "FAILED at step health"));
  CHECK(has(blocked.err, "not the one just started"));
  CHECK(has(blocked.err, "Address already in use"));
  CHECK(Lab::alive(after));
  ::kill(after, SIGTERM);
}

TEST_CASE("an unknown host is refused with its SHA256 fingerprint; --accept-new records it, and then it is known") {
  Lab lab;
  REQUIRE_FALSE(fs::exists(lab.known_hosts));
  auto refused = lab.enroll({"--identity", lab.key.string(), "--node", "node-a"});
  CHECK_MESSAGE(refused.status == 3, refused.err);
  CHECK(has(refused.err, "node-a: FAILED at step host-key"));
  CHECK(has(refused.err, lab.sshd[0]->fingerprint()));
  CHECK(has(refused.err, "--accept-new"));
  CHECK_FALSE(fs::exists(lab.known_hosts));
  CHECK_FALSE(fs::exists(lab.root("node-a")));  // nothing was sent

  auto accepted = lab.enroll({"--identity", lab.key.string(), "--node", "node-a", "--accept-new", "-o", "json"});
  REQUIRE_MESSAGE(accepted.status == 0, accepted.err);
  CHECK(parse(accepted.out)["nodes"][0]["host_key_recorded"] == true);
  // OpenSSH itself finds the recorded key for [127.0.0.1]:port.
  const std::string host = "[127.0.0.1]:" + std::to_string(lab.sshd[0]->port());
  auto found = run({"/usr/bin/ssh-keygen", "-F", host, "-f", lab.known_hosts.string()});
  CHECK(found.status == 0);
  const std::string pub = slurp(lab.sshd[0]->host_public_key());
  CHECK(has(slurp(lab.known_hosts), pub.substr(0, pub.rfind(' '))));

  const std::string recorded = slurp(lab.known_hosts);
  auto known = lab.enroll({"--identity", lab.key.string(), "--node", "node-a", "-o", "json"});
  CHECK_MESSAGE(known.status == 0, known.err);
  CHECK(parse(known.out)["nodes"][0]["host_key_recorded"] == false);
  CHECK(slurp(lab.known_hosts) == recorded);  // recorded once, not again
}

TEST_CASE("a changed host key stops the whole run, even with --accept-new, and known_hosts is left alone") {
  Lab lab(2);
  make_key(lab.dir / "impostor");
  std::string other = slurp(lab.dir / "impostor.pub");
  other = other.substr(0, other.rfind(' '));
  // node-a's entry names a key it does not have; node-b's is right.
  spit(lab.known_hosts, "[127.0.0.1]:" + std::to_string(lab.sshd[0]->port()) + " " + other + "\n" +
                            lab.sshd[1]->known_hosts_line());
  const std::string before = slurp(lab.known_hosts);
  auto r = lab.enroll({"--identity", lab.key.string(), "--accept-new", "-o", "json"});
  CHECK_MESSAGE(r.status == 3, r.err);
  CHECK(has(r.err, "HOST KEY CHANGED"));
  CHECK(has(r.err, lab.sshd[0]->fingerprint()));
  CHECK(slurp(lab.known_hosts) == before);
  CHECK_FALSE(fs::exists(lab.root("node-a")));
  json j = parse(r.out);
  CHECK(j["nodes"][0]["error"]["step"] == "host-key");
  CHECK(j["nodes"][1]["error"]["step"] == "not-started");  // node-b is not contacted after that
  CHECK_FALSE(fs::exists(lab.root("node-b")));
}

TEST_CASE("a login key the node does not authorize is refused, and so is a missing ssh-agent") {
  Lab lab;
  lab.trust_all();
  make_key(lab.dir / "stranger");
  auto r = lab.enroll({"--identity", (lab.dir / "stranger").string(), "--node", "node-a"});
  CHECK_MESSAGE(r.status == 3, r.err);
  CHECK(has(r.err, "FAILED at step auth"));
  CHECK(has(r.err, "refused key " + (lab.dir / "stranger").string() + " for user 'root'"));
  CHECK_FALSE(fs::exists(lab.root("node-a")));

  auto no_agent = lab.enroll({"--node", "node-a"});
  CHECK(no_agent.status == 3);
  CHECK(has(no_agent.err, "no --identity given and no ssh-agent"));

  SUBCASE("the keys of a running ssh-agent log in when no --identity is given") {
    if (::access("/usr/bin/ssh-agent", X_OK) != 0) return;
    const std::string sock = (lab.dir / "agent.sock").string();
    auto agent = run({"/usr/bin/ssh-agent", "-a", sock});
    REQUIRE(agent.status == 0);
    const std::string agent_pid = agent.out.substr(agent.out.find("SSH_AGENT_PID=") + 14);
    auto add = run({"/usr/bin/ssh-add", lab.key.string()}, {"SSH_AUTH_SOCK=" + sock});
    CHECK(add.status == 0);
    auto ok = lab.enroll({"--node", "node-a"}, {"SSH_AUTH_SOCK=" + sock});
    CHECK_MESSAGE(ok.status == 0, ok.err);
    ::kill(static_cast<pid_t>(std::stol(agent_pid)), SIGTERM);
  }
}

TEST_CASE("a copy that changed on the node before it was hashed is caught, and nothing is installed or started") {
  // The node's sshd runs every command through a wrapper that, just before sha256sum runs, appends
  // an allow-list entry for /bin/sh to the staged env file: what a tampering node (or a disk that
  // corrupts writes) looks like from the controller.
  char tmpl[] = "/tmp/tandem-tamper-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{tmpl};
  const fs::path wrapper = fs::path(tmpl) / "tamper.sh";
  Lab lab(1, SshdOptions{"127.0.0.1", "", wrapper.string()});
  spit(wrapper,
       "#!/bin/sh\n"
       "case \"$SSH_ORIGINAL_COMMAND\" in\n"
       "  *sha256sum*) for f in " + (lab.root("node-a") / "etc/tandem/tandemd.env").string() + "*; do\n"
       "      printf 'TANDEMD_ALLOW_EXEC=\"--allow-exec /bin/sh\"\\n' >> \"$f\"; done ;;\n"
       "esac\n"
       "exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"\n");
  fs::permissions(wrapper, fs::perms::owner_all);
  lab.trust_all();
  auto r = lab.enroll({"--identity", lab.key.string(), "--node", "node-a", "-o", "json"});
  CHECK_MESSAGE(r.status == 3, r.err);
  CHECK(has(r.err, "FAILED at step verify"));
  const fs::path env = lab.root("node-a") / "etc/tandem/tandemd.env";
  CHECK(has(r.err, env.string() + " (env file): sent sha256 "));
  json j = parse(r.out);
  CHECK(j["nodes"][0]["error"]["step"] == "verify");
  int mismatched = 0;
  for (const auto& f : j["nodes"][0]["files"]) mismatched += f["sha256"] != f["remote_sha256"];
  CHECK(mismatched == 1);
  // Not installed, staged copies gone, no agent.
  CHECK_FALSE(fs::exists(env));
  CHECK_FALSE(fs::exists(lab.root("node-a") / "usr/local/sbin/tandemd"));
  for (const auto& e : fs::recursive_directory_iterator(lab.root("node-a")))
    CHECK_MESSAGE(e.path().string().find(".tandem-new") == std::string::npos, e.path());
  CHECK_FALSE(fs::exists(lab.root("node-a") / "var/lib/tandem/tandemd.pid"));
}

TEST_CASE("bad input stops before any node is contacted") {
  Lab lab;
  lab.trust_all();
  auto no_pki = run({TANDEMCTL_BIN, "enroll", lab.manifest.string(), "--pki-dir", (lab.dir / "no-pki").string(),
                     "--agent-binary", TANDEMD_BIN, "--start", "direct", "--identity", lab.key.string()});
  CHECK(no_pki.status == 1);
  CHECK(has(no_pki.err, "tandemctl pki init"));
  auto systemd = run({TANDEMCTL_BIN, "enroll", lab.manifest.string(), "--pki-dir", lab.pki.string(), "--agent-binary",
                      TANDEMD_BIN, "--identity", lab.key.string()});
  CHECK(systemd.status == 1);
  CHECK(has(systemd.err, "--start direct"));
  auto unknown_node = lab.enroll({"--identity", lab.key.string(), "--node", "node-z"});
  CHECK(unknown_node.status == 1);
  CHECK(has(unknown_node.err, "node-z"));
  CHECK_FALSE(has(lab.sshd[0]->log(), "Accepted publickey"));
}
