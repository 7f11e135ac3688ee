#include "enroll_plan.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "ssh/session.hpp"
#include "tandem/net/pki.hpp"

namespace tandem::enroll {
namespace {

using ssh::shell_quote;

Result<std::string> read_file(const std::filesystem::path& p, const std::string& label, const std::string& hint) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return Error{label + " " + p.string() + " does not exist" + hint};
  std::ifstream in(p, std::ios::binary);
  if (!in) return Error{label + " " + p.string() + ": cannot read: " + std::strerror(errno)};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_ip_literal(const std::string& a) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, a.c_str(), buf) == 1 || ::inet_pton(AF_INET6, a.c_str(), buf) == 1;
}

// Node names become file names and a pattern the stop logic greps for.
bool safe_name(const std::string& n) {
  return !n.empty() && std::all_of(n.begin(), n.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  }) && n.front() != '.';
}

// systemd splits $TANDEMD_ALLOW_EXEC on whitespace and sha256sum escapes some bytes in its output.
bool plain_path(const std::string& p) {
  return !p.empty() && p.front() == '/' && std::none_of(p.begin(), p.end(), [](unsigned char c) {
    return std::isspace(c) || c == '"' || c == '\'' || c == '\\' || c == '$' || c == '`' || c < 0x20;
  });
}

std::string parent(const std::string& path) { return path.substr(0, path.rfind('/')); }

}  // namespace

std::string under_root(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return r + path;
}

std::string NodePlan::at(const std::string& path) const { return under_root(node->root, path); }

std::vector<std::string> allow_exec_for(const Manifest& m, const Node& node) {
  std::set<std::string> s{m.engine.binary};
  for (const auto& c : m.hygiene.stop)
    if (m.selects(c, node) && !c.run.empty()) s.insert(c.run.front());
  for (const auto& c : m.rollback.commands)
    if (m.selects(c, node) && !c.run.empty()) s.insert(c.run.front());
  return {s.begin(), s.end()};
}

std::string render_env(const Manifest& m, const Node& node, const std::vector<std::string>& allow_exec,
                       const std::string& listen) {
  std::string flags;
  for (const auto& a : allow_exec) flags += (flags.empty() ? "" : " ") + std::string("--allow-exec ") + a;
  return "# " + std::string(kEnvPath) + ": tandemd.service's settings for node '" + node.name +
         "', written by `tandemctl enroll` from bind '" + m.name + "' (mode 0640).\n"
         "TANDEMD_NODE=" + node.name + "\n"
         "TANDEMD_LISTEN=" + listen + "\n"
         "TANDEMD_ALLOW_EXEC=\"" + flags + "\"\n";
}

namespace {

// The files the node gets, read and checked here (binary, CA, the node's certificate and key,
// which must be a pair for this node) and rendered (env file, unit), each with its digest.
Status add_install_files(NodePlan& p, const Manifest& m, const Node& node, const Options& o) {
  net::PkiLayout pki{o.pki_dir};
  const std::string init_hint = ": make the cluster PKI with `tandemctl pki init " + o.pki_dir.string() + " " +
                                (m.file.empty() ? std::string("MANIFEST") : m.file) + "` first";
  auto binary = read_file(o.agent_binary, "agent binary", " (build tandemd, or name it with --agent-binary)");
  if (!binary) return binary.error();
  auto ca = read_file(pki.ca_cert(), "CA certificate", init_hint);
  if (!ca) return ca.error();
  auto cert = read_file(pki.node_cert(node.name), "node certificate", init_hint);
  if (!cert) return cert.error();
  auto key = read_file(pki.node_key(node.name), "node key", init_hint);
  if (!key) return key.error();
  if (auto pair = net::read_credential(pki.node_cert(node.name), pki.node_key(node.name)); !pair)
    return pair.error().with_context("node '" + node.name + "' certificate");
  auto info = net::inspect_certificate(cert.value());
  if (!info) return info.error().with_context(pki.node_cert(node.name).string());
  if (info->subject_cn != node.name)
    return Error{pki.node_cert(node.name).string() + " is for '" + info->subject_cn + "', not node '" + node.name +
                 "'; the controller would refuse this agent"};

  auto add = [&](std::string label, const std::string& path, unsigned mode, std::string content) {
    InstallFile f{std::move(label), p.at(path), mode, std::move(content), {}};
    f.sha256 = sha256_hex(f.content);
    p.files.push_back(std::move(f));
  };
  const std::string pki_dir = kPkiDir;
  add("agent binary", kBinaryPath, 0755, std::move(binary.value()));
  add("CA certificate", pki_dir + "/ca.pem", 0644, std::move(ca.value()));
  add("node certificate", pki_dir + "/nodes/" + node.name + ".pem", 0644, std::move(cert.value()));
  add("node key", pki_dir + "/nodes/" + node.name + ".key", 0600, std::move(key.value()));
  add("env file", kEnvPath, 0640, render_env(m, node, p.allow_exec, p.listen));
  add("systemd unit", kUnitPath, 0644, embedded_tandemd_unit());
  return {};
}

// --start direct: stop the agent this node ran before, then start tandemd detached, its pid in a file.
std::string direct_start_command(const NodePlan& p, const Node& node) {
  const std::string pid = shell_quote(p.at(kDirectPid));
  const std::string log = shell_quote(p.at(kDirectLog));
  // The agent this node ran before (its pid file, checked against /proc so a recycled pid is
  // never signalled) must free the port first. A zombie counts as gone: it holds no socket.
  std::string stop =
      "if [ -f " + pid + " ]; then old=$(cat " + pid + "); "
      "if [ -n \"$old\" ] && tr '\\0' ' ' < /proc/$old/cmdline 2>/dev/null | grep -qF -- " +
      shell_quote(" serve --node " + node.name + " ") + "; then kill \"$old\"; i=0; "
      "while [ $i -lt 50 ] && [ -d /proc/$old ] && [ \"$(sed 's/.*) //' /proc/$old/stat 2>/dev/null | cut -c1)\" != Z ]; "
      "do sleep 0.1; i=$((i+1)); done; kill -9 \"$old\" 2>/dev/null; fi; fi; ";
  std::string argv = shell_quote(p.at(kBinaryPath)) + " serve --node " + shell_quote(node.name);
  if (node.root != "/") argv += " --root " + shell_quote(node.root);
  argv += " --listen " + shell_quote(p.listen) + " --state-dir " + shell_quote(kStateDir) + " --pki-dir " +
          shell_quote(p.at(kPkiDir));
  for (const auto& a : p.allow_exec) argv += " --allow-exec " + shell_quote(a);
  // setsid + nohup: the agent outlives this SSH session; the inner sh writes its own pid, which
  // exec hands to tandemd, so the pid file names the agent itself.
  // The new pid file appears once the agent's shell runs; its pid is what health must report.
  return stop + "rm -f " + pid + "; setsid nohup sh -c 'echo $$ > \"$0\"; exec \"$@\"' " + pid + " " + argv +
         " >> " + log + " 2>&1 < /dev/null & i=0; while [ ! -s " + pid + " ] && [ $i -lt 50 ]; do sleep 0.1; "
         "i=$((i+1)); done; echo tandemd-pid=$(cat " + pid + ")";
}

}  // namespace

Result<NodePlan> plan_node(const Manifest& m, const Node& node, const Options& o) {
  NodePlan p;
  p.node = &node;
  if (!safe_name(node.name))
    return Error{"node name '" + node.name + "' cannot name files on the node; use letters, digits, '-', '_' and '.'"};
  if (!plain_path(node.root))
    return Error{"node root '" + node.root + "' must be an absolute path without spaces, quotes or backslashes"};
  if (o.start == StartMode::systemd && node.root != "/")
    return Error{"node '" + node.name + "' has root " + node.root +
                 " (a sandboxed test node): systemd would ignore that prefix; enroll it with --start direct"};
  p.allow_exec = allow_exec_for(m, node);
  for (const auto& a : p.allow_exec)
    if (!plain_path(a))
      return Error{"executable '" + a + "' cannot go into tandemd.env's --allow-exec list (absolute path without "
                   "spaces, quotes or backslashes expected)"};
  // The head's agent also serves the stage source to the other nodes' agents over the fabric
  // (stage.from: head): where the fabric has an address of its own, one listening address would
  // refuse those pulls, so it listens on every address (mutual TLS guards each one).
  const bool serves_fabric = m.stage && m.stage->from == Stage::From::head && node.role == Role::head &&
                             node.fabric_address != node.address;
  p.listen = (is_ip_literal(node.address) && !serves_fabric ? node.address : std::string("0.0.0.0")) + ":" +
             std::to_string(node.agent_port);

  // The local side first: a missing or mismatched certificate stops before any connection.
  if (auto st = add_install_files(p, m, node, o); !st) return st.error();

  // prepare: the directories (over SFTP); the tools the later steps use are checked by verify.
  std::set<std::string> dirs{p.at(kStateDir)};
  for (const auto& f : p.files) dirs.insert(parent(f.remote));
  if (o.start == StartMode::direct) dirs.insert(parent(p.at(kDirectLog)));
  p.dirs.assign(dirs.begin(), dirs.end());
  p.private_dir = p.at(kStateDir);
  p.tools = "sha256sum mv rm tail";
  p.tools += o.start == StartMode::systemd ? " systemctl journalctl" : " setsid nohup sh sed grep tr cut cat kill";

  std::string mv;
  for (const auto& f : p.files)
    mv += (mv.empty() ? "" : " && ") + std::string("mv -f ") + shell_quote(f.staged()) + " " + shell_quote(f.remote);
  p.install_command = mv;

  if (o.start == StartMode::systemd) {
    // restart, not just enable --now: a running agent must pick up the binary just installed.
    p.start_command = "systemctl daemon-reload && systemctl enable tandemd.service && systemctl restart tandemd.service && "
                      "echo tandemd-pid=$(systemctl show -p MainPID --value tandemd.service)";
    p.log_command = "journalctl -u tandemd.service -n 20 --no-pager 2>&1";
  } else {
    p.start_command = direct_start_command(p, node);
    p.log_command = "tail -n 20 " + shell_quote(p.at(kDirectLog)) + " 2>&1";
  }
  return p;
}

}  // namespace tandem::enroll
