// Two test hosts in network namespaces (netns.sh: management links to the root namespace, a veth
// fabric between them), each with a real sshd on port 22; the controller's side (login key,
// known_hosts, PKI dir, manifest) in a temporary directory. Skips the test (exit 77) with the
// reason where namespaces or sshd are not available. Tearing down kills everything in both
// namespaces (the agents enroll started, too); netns.sh's guard does it if this process dies.
#pragma once
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "sshd_fixture.hpp"

namespace tandem::test {

struct NetnsCluster {
  fs::path dir, state, key, pki, known_hosts, manifest;
  std::map<std::string, std::string> env;  // netns.env: NS_A, A_ADDR, A_FABRIC, LINK_A, ...
  std::unique_ptr<Sshd> sshd_a, sshd_b;
  bool up = false;

  NetnsCluster() {
    if (auto why = sshd_unavailable()) skip(*why);
    if (::geteuid() != 0) skip("network namespaces and sshd logins as root need root (uid is " + std::to_string(::geteuid()) + ")");
    char tmpl[] = "/tmp/tandem-cluster-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    state = dir / "netns";
    auto r = run({"/bin/bash", std::string(TANDEM_SOURCE_DIR) + "/tests/cluster/netns.sh", "up", state.string(), "--owner",
                  std::to_string(::getpid())});
    if (r.status == 77) {
      fs::remove_all(dir);
      skip(r.err);
    }
    REQUIRE_MESSAGE(r.status == 0, "netns.sh up failed: " << r.err);
    up = true;
    std::istringstream in(slurp(state / "netns.env"));
    for (std::string line; std::getline(in, line);)
      if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    sshd_a = std::make_unique<Sshd>(dir / "sshd-a", SshdOptions{env["A_ADDR"], env["NS_A"], ""});
    sshd_b = std::make_unique<Sshd>(dir / "sshd-b", SshdOptions{env["B_ADDR"], env["NS_B"], ""});
    key = dir / "id_ed25519";
    make_key(key);
    sshd_a->authorize(key.string() + ".pub");
    sshd_b->authorize(key.string() + ".pub");
    known_hosts = dir / "known_hosts";
    spit(known_hosts, sshd_a->known_hosts_line() + sshd_b->known_hosts_line());
    pki = dir / "pki";
  }

  ~NetnsCluster() {
    sshd_a.reset();
    sshd_b.reset();
    if (up) (void)run({"/bin/bash", std::string(TANDEM_SOURCE_DIR) + "/tests/cluster/netns.sh", "down", state.string()});
    fs::remove_all(dir);
  }

  [[noreturn]] static void skip(const std::string& why) {
    MESSAGE("skipped: " << why);
    std::exit(77);
  }

  fs::path root(const std::string& node) const { return dir / ("root-" + node); }

  // Node a is the head, b the worker; the fabric addresses are the veth pair between them.
  // `rest` is everything after `nodes:` (engine, hygiene, gates, deadman, rollback).
  void write_manifest(const std::string& name, int agent_port, const std::string& rest) {
    auto node = [&](const std::string& n, const std::string& role, const std::string& addr, const std::string& fabric) {
      return "  - name: " + n + "\n    address: " + addr + "\n    fabric_address: " + fabric + "\n    role: " + role +
             "\n    ssh: {user: root, port: 22}\n    agent: {port: " + std::to_string(agent_port) + "}\n    root: " +
             root(n).string() + "\n";
    };
    manifest = dir / "m.yaml";
    spit(manifest, "apiVersion: tandem/v1\nkind: Bind\nmetadata: {name: " + name + "}\nnodes:\n" +
                       node("node-a", "head", env["A_ADDR"], env["A_FABRIC"]) +
                       node("node-b", "worker", env["B_ADDR"], env["B_FABRIC"]) + rest);
  }

  // The network namespace a process is in equals the one netns.sh made for `ns`.
  static bool runs_in(pid_t pid, const std::string& ns) {
    struct stat a {}, b {};
    return ::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &a) == 0 &&
           ::stat(("/run/netns/" + ns).c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
  }
};

}  // namespace tandem::test
