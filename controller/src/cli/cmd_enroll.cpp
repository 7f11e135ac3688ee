// enroll: install and start tandemd on each node of a manifest over SSH (libssh), then prove the
// agent answers over mutual TLS. Every node is planned (local files read, certificates checked)
// before the first connection; a changed host key stops the whole run.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "commands.hpp"
#include "enroll/enroll_node.hpp"
#include "tandem/net/pki.hpp"

namespace tandem::cli {
namespace {

struct EnrollOpts {
  ManifestArg manifest;
  std::string pki_dir;
  std::string known_hosts;
  bool accept_new = false;
  std::string identity;
  std::string agent_binary;
  std::string start = "systemd";
  std::vector<std::string> only;
  int health_timeout_s = 30;
  int ssh_timeout_s = 10;
};

std::string home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_dir;
  return ".";
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, static_cast<size_t>(n))).parent_path().string();
}

std::string mode_text(unsigned mode) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", mode);
  return b;
}

nlohmann::ordered_json report_json(const enroll::NodeReport& r) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& f : r.files)
    files.push_back({{"label", f.label}, {"path", f.remote}, {"mode", mode_text(f.mode)}, {"bytes", f.bytes},
                     {"sha256", f.sha256}, {"remote_sha256", f.remote_sha256}});
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const auto& [name, ms] : r.step_ms) steps.push_back({{"step", name}, {"ms", static_cast<long>(ms + 0.5)}});
  nlohmann::ordered_json j{{"node", r.node},       {"ssh", r.ssh},         {"ok", r.ok},
                           {"host_key", r.host_key}, {"host_key_recorded", r.host_key_recorded},
                           {"files", files},       {"steps", steps}};
  if (r.ok) j["agent_version"] = r.agent_version;
  else j["error"] = {{"step", r.failed_step}, {"message", r.error}};
  return j;
}

// Node by node, in manifest order; once a node's host key has changed, the rest are reported as
// not attempted.
std::vector<enroll::NodeReport> enroll_each(const std::vector<enroll::NodePlan>& plans, const enroll::RunOptions& ro) {
  std::vector<enroll::NodeReport> reports;
  bool stopped = false;
  for (const auto& plan : plans) {
    const std::string name = plan.node->name;
    if (stopped) {
      enroll::NodeReport skipped;
      skipped.node = name;
      skipped.failed_step = "not-started";
      skipped.error = "not attempted: an earlier node's host key changed";
      reports.push_back(skipped);
      continue;
    }
    auto progress = [&](const std::string& step, const std::string& detail) {
      std::cerr << name << ": " << step << ": " << detail << std::endl;
    };
    reports.push_back(enroll::enroll_node(plan, ro, progress));
    const auto& r = reports.back();
    if (!r.ok) std::cerr << name << ": FAILED at step " << r.failed_step << ": " << r.error << std::endl;
    if (r.host_key_changed) stopped = true;
  }
  return reports;
}

void print_reports(const std::vector<enroll::NodeReport>& reports, const std::string& bind, const std::string& start,
                   bool all_ok, bool json) {
  if (json) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& r : reports) arr.push_back(report_json(r));
    std::cout << nlohmann::ordered_json{{"ok", all_ok}, {"bind", bind}, {"start", start}, {"nodes", arr}}.dump(2)
              << "\n";
  } else {
    for (const auto& r : reports) {
      if (r.ok)
        std::cout << r.node << ": enrolled; tandemd " << r.agent_version << " answers over mutual TLS; " << r.files.size()
                  << " files verified by SHA-256; host key " << r.host_key << "\n";
      else
        std::cout << r.node << ": NOT enrolled (step " << r.failed_step << ")\n";
    }
  }
}

int run(const EnrollOpts& o) {
  const bool json = o.manifest.output == "json";
  auto loaded = load(o.manifest);
  if (!loaded.manifest) return report_errors(loaded, o.manifest.output);
  const Manifest& m = *loaded.manifest;

  auto fail_input = [&](const std::string& msg) {
    if (json) std::cout << nlohmann::ordered_json{{"ok", false}, {"error", msg}}.dump(2) << "\n";
    else std::cerr << "tandemctl enroll: " << msg << "\n";
    return kExitInvalid;
  };
  std::vector<const Node*> nodes;
  for (const auto& name : o.only) {
    auto it = std::find_if(m.nodes.begin(), m.nodes.end(), [&](const Node& n) { return n.name == name; });
    if (it == m.nodes.end()) return fail_input("--node " + name + ": the manifest has no such node");
  }
  for (const auto& n : m.nodes)
    if (o.only.empty() || std::count(o.only.begin(), o.only.end(), n.name)) nodes.push_back(&n);

  enroll::Options eo;
  eo.pki_dir = o.pki_dir;
  eo.agent_binary = o.agent_binary.empty() ? self_dir() + "/tandemd" : o.agent_binary;
  eo.start = o.start == "direct" ? enroll::StartMode::direct : enroll::StartMode::systemd;
  std::vector<enroll::NodePlan> plans;
  for (const Node* n : nodes) {
    auto p = enroll::plan_node(m, *n, eo);
    if (!p) return fail_input(n->name + ": " + p.error().message);
    plans.push_back(std::move(p.value()));
  }

  net::PkiLayout pki{o.pki_dir};
  net::ClientOptions co;
  co.ca_file = pki.ca_cert();
  co.cert_file = pki.controller_cert();
  co.key_file = pki.controller_key();
  co.connect_timeout = std::chrono::seconds(2);
  co.handshake_timeout = std::chrono::seconds(5);
  co.io_timeout = std::chrono::seconds(10);
  auto client = net::HttpsClient::create(co);
  if (!client) return fail_input("the controller's certificate: " + client.error().message);

  enroll::RunOptions ro;
  ro.known_hosts = o.known_hosts.empty() ? home_dir() + "/.ssh/known_hosts" : o.known_hosts;
  ro.unknown_host = o.accept_new ? ssh::UnknownHost::accept_new : ssh::UnknownHost::refuse;
  ro.identity = o.identity;
  ro.ssh_timeout = std::chrono::seconds(o.ssh_timeout_s);
  ro.health_timeout = std::chrono::seconds(o.health_timeout_s);
  ro.client = &client.value();

  const std::vector<enroll::NodeReport> reports = enroll_each(plans, ro);

  const bool all_ok = std::all_of(reports.begin(), reports.end(), [](const auto& r) { return r.ok; });
  print_reports(reports, m.name, o.start, all_ok, json);
  return all_ok ? 0 : kExitFailed;
}

}  // namespace

void add_enroll_command(CLI::App& app) {
  auto o = std::make_shared<EnrollOpts>();
  auto* cmd = app.add_subcommand("enroll", "Install and start tandemd on each node over SSH, and prove it answers over mTLS");
  add_manifest_arg(cmd, o->manifest);
  o->pki_dir = "/etc/tandem/pki";
  cmd->add_option("--pki-dir", o->pki_dir, "Cluster PKI from `tandemctl pki init DIR` (ca.pem, controller.pem/.key, nodes/)")
      ->envname("TANDEM_PKI_DIR")
      ->capture_default_str();
  cmd->add_option("--known-hosts", o->known_hosts,
                  "known_hosts file the node host keys must be in (default ~/.ssh/known_hosts); nothing else is trusted");
  cmd->add_flag("--accept-new", o->accept_new,
                "Record the key of a host not yet in known_hosts (check its fingerprint first). A CHANGED key is "
                "refused regardless");
  cmd->add_option("--identity", o->identity,
                  "Private key for SSH login (unencrypted). Default: the keys of the running ssh-agent");
  cmd->add_option("--agent-binary", o->agent_binary, "The tandemd to install (default: tandemd next to tandemctl)");
  cmd->add_option("--start", o->start,
                  "systemd: install tandemd.service, daemon-reload, enable and restart it. direct: run tandemd "
                  "detached (setsid+nohup; for hosts without systemd and sandboxed test nodes)")
      ->check(CLI::IsMember({"systemd", "direct"}));
  cmd->add_option("--node", o->only, "Enroll only this node (repeat for more); default: every node");
  cmd->add_option("--timeout", o->health_timeout_s, "Seconds to wait for the started agent to answer")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--ssh-timeout", o->ssh_timeout_s, "Seconds for the SSH connection and key exchange")
      ->check(CLI::Range(1, 600));
  cmd->footer(
      "Per node, in order:\n"
      "  connect    TCP and SSH key exchange (~/.ssh/config is not read)\n"
      "  host-key   the key must be in --known-hosts; an unknown one is refused with its SHA256\n"
      "             fingerprint unless --accept-new; a CHANGED one stops the whole run\n"
      "  auth       key login: --identity FILE, or the keys of ssh-agent\n"
      "  prepare    directories are made (over SFTP)\n"
      "  copy       over SFTP, to staged names: tandemd -> /usr/local/sbin/tandemd; ca.pem and the\n"
      "             node's certificate and key (0600) -> /etc/tandem/pki/; tandemd.env -> /etc/tandem/;\n"
      "             tandemd.service -> /etc/systemd/system/\n"
      "  verify     the node has the tools the next steps use, and sha256sum on the node must equal the\n"
      "             SHA-256 of what was sent, or nothing is installed\n"
      "  start      rename the files into place and start the agent (one SSH command)\n"
      "  health     GET /v1/health over mutual TLS with the controller certificate must name this node\n"
      "             within --timeout\n"
      "A node with a root prefix (a sandboxed test node) gets every path under that root.\n"
      "Progress goes to stderr; -o json prints a summary per node (files, hashes, modes, step timings).\n"
      "Exit status: 0 all enrolled, 1 bad input (no node contacted), 3 a node failed.\n\n"
      "Example: tandemctl pki init /etc/tandem/cluster m.yaml\n"
      "         tandemctl enroll m.yaml --pki-dir /etc/tandem/cluster --identity ~/.ssh/id_ed25519");
  cmd->callback([o] { std::exit(run(*o)); });
}

}  // namespace tandem::cli
