// Enrolment across two hosts in network namespaces, driven from the root namespace like an
// operator's workstation: tandemctl pki init, then tandemctl enroll over real sshd in each
// namespace; both agents must answer over mutual TLS from inside their own namespace. And a host
// whose management link is down fails at `connect` without holding up the other.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "netns_cluster.hpp"
#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"

using namespace tandem::test;
using nlohmann::json;

namespace {

const char* kRest =
    "engine:\n  binary: /opt/tandem/bin/tandem-serve\n  model_dir: /models/m\n  run_user: root\n"
    "  cache_dir: /var/cache/tandem\n"
    "  serve: {port: 18888, tensor_parallel_size: 2, gpu_memory_utilization: 0.5, device: cpu}\n"
    "rollback:\n  commands:\n    - {on: head, run: [/usr/bin/true]}\n  verify: {url: 'http://127.0.0.1:18888/health'}\n"
    "gates: {tool_call: false}\ndeadman: {delay: 2h, backend: agent}\n";

std::vector<std::string> enroll_argv(const NetnsCluster& c, std::vector<std::string> extra) {
  std::vector<std::string> a{TANDEMCTL_BIN,  "enroll",         c.manifest.string(), "--pki-dir", c.pki.string(),
                             "--known-hosts", c.known_hosts.string(), "--identity", c.key.string(), "--agent-binary",
                             TANDEMD_BIN,    "--start",        "direct",            "--timeout", "20"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

tandem::net::HttpsClient controller_client(const NetnsCluster& c) {
  tandem::net::PkiLayout l{c.pki};
  tandem::net::ClientOptions o;
  o.ca_file = l.ca_cert();
  o.cert_file = l.controller_cert();
  o.key_file = l.controller_key();
  o.connect_timeout = std::chrono::seconds(2);
  auto client = tandem::net::HttpsClient::create(o);
  REQUIRE(client.ok());
  return std::move(client.value());
}

}  // namespace

TEST_CASE("both namespace hosts are enrolled from the root namespace, and both agents answer from their own namespace") {
  NetnsCluster c;
  c.write_manifest("netns-enroll", 7443, kRest);
  auto pki = run({TANDEMCTL_BIN, "pki", "init", c.pki.string(), c.manifest.string()});
  REQUIRE_MESSAGE(pki.status == 0, pki.err);

  auto r = run(enroll_argv(c, {"-o", "json"}), {"SSH_AUTH_SOCK="});
  REQUIRE_MESSAGE(r.status == 0, r.err);
  json j = json::parse(r.out);
  CHECK(j["ok"] == true);

  auto client = controller_client(c);
  for (const auto& [node, ns, addr] : {std::tuple{"node-a", c.env["NS_A"], c.env["A_ADDR"]},
                                       std::tuple{"node-b", c.env["NS_B"], c.env["B_ADDR"]}}) {
    CAPTURE(node);
    auto h = client.get({addr, 7443, node}, "/v1/health");
    REQUIRE_MESSAGE(h.ok(), (h.ok() ? "" : h.error().message));
    CHECK(h.value().status == 200);
    auto hj = json::parse(h.value().body);
    CHECK(hj["node"] == node);
    CHECK(hj["root"] == c.root(node).string());
    const pid_t pid = static_cast<pid_t>(std::stol(slurp(c.root(node) / "var/lib/tandem/tandemd.pid")));
    CHECK(NetnsCluster::runs_in(pid, ns));
  }
  // node-b's certificate does not pass for node-a: the CN is checked, not just the CA.
  auto wrong = client.get({c.env["B_ADDR"], 7443, "node-a"}, "/v1/health");
  CHECK_FALSE(wrong.ok());
}

TEST_CASE("a host whose management link is down fails at connect, and the other host is still enrolled") {
  NetnsCluster c;
  c.write_manifest("netns-enroll-fault", 7443, kRest);
  REQUIRE(run({TANDEMCTL_BIN, "pki", "init", c.pki.string(), c.manifest.string()}).status == 0);
  REQUIRE(run({"/usr/sbin/ip", "link", "set", c.env["LINK_B"], "down"}).status == 0);

  auto r = run(enroll_argv(c, {"-o", "json", "--ssh-timeout", "3"}), {"SSH_AUTH_SOCK="});
  CHECK_MESSAGE(r.status == 3, r.err);
  json j = json::parse(r.out);
  CHECK(j["nodes"][0]["ok"] == true);
  CHECK(j["nodes"][1]["ok"] == false);
  CHECK(j["nodes"][1]["error"]["step"] == "connect");
  CHECK(j["nodes"][1]["error"]["message"].get<std::string>().find(c.env["B_ADDR"]) != std::string::npos);
  CHECK_FALSE(fs::exists(c.root("node-b")));
  auto h = controller_client(c).get({c.env["A_ADDR"], 7443, "node-a"}, "/v1/health");
  CHECK((h.ok() && h.value().status == 200));
}
