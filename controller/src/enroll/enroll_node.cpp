#include "enroll_node.hpp"

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace tandem::enroll {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string size_text(std::size_t n) {
  std::ostringstream s;
  s.precision(3);
  if (n >= 1024 * 1024) s << static_cast<double>(n) / (1024.0 * 1024.0) << " MiB";
  else if (n >= 1024) s << n / 1024 << " KiB";
  else s << n << " B";
  return s.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// "HASH  PATH" lines (sha256sum's text mode; " *PATH" in binary mode).
std::map<std::string, std::string> parse_sha256sum(const std::string& out) {
  std::map<std::string, std::string> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() < 66 || line[64] != ' ') continue;
    std::string path = line.substr(66);
    m[path] = line.substr(0, 64);
  }
  return m;
}

class Runner {
 public:
  Runner(const NodePlan& plan, const RunOptions& o, const Progress& progress, NodeReport& r)
      : plan_(plan), o_(o), progress_(progress), r_(r) {}

  // Runs `fn` as step `name`; false (with the report filled in) when it failed.
  template <class Fn>
  bool step(const std::string& name, Fn fn) {
    const auto t0 = Clock::now();
    Status st = fn();
    r_.step_ms.emplace_back(name, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (st) return true;
    if (r_.failed_step.empty()) r_.failed_step = name;
    r_.error = st.error().message;
    return false;
  }

  void run() {
    const Node& n = *plan_.node;
    ssh::Target target{n.address, n.ssh_port, n.ssh_user};
    r_.ssh = target.user + "@" + target.host + ":" + std::to_string(target.port);

    if (!step("connect", [&]() -> Status {
          progress_("connect", r_.ssh);
          auto s = ssh::Session::open(target, o_.known_hosts, o_.ssh_timeout);
          if (!s) return s.error();
          session_ = std::move(s.value());
          return {};
        }))
      return;
    if (!step("host-key", [&]() -> Status {
          auto v = session_->verify_host_key(o_.unknown_host);
          r_.host_key = v.key_type + " " + v.fingerprint;
          r_.host_key_recorded = v.kind == ssh::HostKeyVerdict::Kind::recorded;
          r_.host_key_changed = v.kind == ssh::HostKeyVerdict::Kind::changed;
          if (v.kind == ssh::HostKeyVerdict::Kind::unknown)
            return Error{v.message + ". Check that fingerprint on the node itself (ssh-keygen -lf "
                         "/etc/ssh/ssh_host_*_key.pub), then rerun with --accept-new to record it in " +
                         o_.known_hosts.string()};
          if (!v.ok()) return Error{v.message};
          progress_("host-key", r_.host_key + (r_.host_key_recorded ? " (new: recorded in " + o_.known_hosts.string() + ")"
                                                                    : " (known)"));
          return {};
        }))
      return;
    if (!step("auth", [&] { return session_->authenticate(o_.identity); })) return;
    // Over the SFTP session the copy uses: a login shell on the node costs seconds on some hosts.
    if (!step("prepare", [&]() -> Status {
          for (const auto& d : plan_.dirs)
            if (auto st = session_->make_dirs(d, 0755); !st) return st;
          return session_->chmod(plan_.private_dir, 0700);
        }))
      return;
    if (!step("copy", [&]() -> Status {
          for (const auto& f : plan_.files) {
            progress_("copy", f.label + " -> " + f.remote + " (" + size_text(f.content.size()) + ")");
            if (auto st = session_->upload(f.content, f.staged(), f.mode); !st) return st.error().with_context(f.label);
            r_.files.push_back({f.label, f.remote, f.mode, f.content.size(), f.sha256, {}});
          }
          return {};
        }))
      return;
    if (!step("verify", [&] { return verify(); })) {
      remove_staged();
      return;
    }
    // One SSH command for both (each session costs the node a login shell): the marker tells
    // which of the two failed.
    if (!step("start", [&]() -> Status {
          progress_("start", "install the verified files, then start tandemd on " + plan_.listen);
          auto r = session_->exec(plan_.install_command + " && echo tandem-installed && " + plan_.start_command, 60s);
          if (!r) return r.error().with_context("installing and starting tandemd");
          if (r->exit_status == 0) {
            if (auto at = r->out.find("tandemd-pid="); at != std::string::npos)
              started_pid_ = std::atol(r->out.c_str() + at + 12);
            return {};
          }
          const bool installed = r->out.find("tandem-installed") != std::string::npos;
          if (!installed) r_.failed_step = "install";
          std::string why = trimmed(r->err.empty() ? r->out : r->err);
          return Error{std::string(installed ? "starting tandemd" : "moving the verified files into place") +
                       " failed (exit " + std::to_string(r->exit_status) + ")" + (why.empty() ? "" : ": " + why)};
        }))
      return;
    if (!step("health", [&] { return wait_healthy(); })) return;
    r_.ok = true;
  }

 private:
  Status verify() {
    // The tools check rides along: a node without them fails here, before anything is installed.
    std::string cmd = "missing=''; for t in " + plan_.tools +
                      "; do command -v \"$t\" >/dev/null 2>&1 || missing=\"$missing $t\"; done; "
                      "if [ -n \"$missing\" ]; then echo \"the node lacks:$missing\" >&2; exit 3; fi; sha256sum --";
    for (const auto& f : plan_.files) cmd += " " + ssh::shell_quote(f.staged());
    auto res = session_->exec(cmd, 120s);
    if (!res) return res.error().with_context("sha256sum on the node");
    if (res->exit_status == 3 && res->err.find("the node lacks:") != std::string::npos) return Error{trimmed(res->err)};
    auto sums = parse_sha256sum(res->out);
    std::string bad;
    for (std::size_t i = 0; i < plan_.files.size(); ++i) {
      const auto& f = plan_.files[i];
      auto it = sums.find(f.staged());
      r_.files[i].remote_sha256 = it == sums.end() ? "" : it->second;
      if (it == sums.end())
        bad += "; " + f.remote + ": sha256sum gave no hash (" + trimmed(res->err) + ")";
      else if (it->second != f.sha256)
        bad += "; " + f.remote + " (" + f.label + "): sent sha256 " + f.sha256 + ", the node has " + it->second;
    }
    if (!bad.empty())
      return Error{"the copy on the node differs from what was sent" + bad +
                   ". Nothing was installed; the staged copies were removed"};
    progress_("verify", std::to_string(plan_.files.size()) + " files, SHA-256 equal on both sides");
    return {};
  }

  void remove_staged() {
    std::string cmd = "rm -f --";
    for (const auto& f : plan_.files) cmd += " " + ssh::shell_quote(f.staged());
    (void)session_->exec(cmd, 30s);  // best effort: the failure already being reported matters more
  }

  Status wait_healthy() {
    const Node& n = *plan_.node;
    net::Endpoint ep{n.address, static_cast<std::uint16_t>(n.agent_port), n.name};
    const auto deadline = Clock::now() + o_.health_timeout;
    std::string last = "no answer yet";
    progress_("health", "waiting for GET /v1/health on " + n.address + ":" + std::to_string(n.agent_port) +
                            " (mutual TLS, CN " + n.name + ")");
    while (Clock::now() < deadline) {
      auto r = o_.client->get(ep, "/v1/health");
      if (!r) {
        last = r.error().message;
      } else if (r->status != 200) {
        last = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
      } else {
        auto j = nlohmann::json::parse(r->body, nullptr, false);
        const long pid = j.is_object() ? j.value("pid", 0L) : 0L;
        if (j.is_object() && j.value("node", "") == n.name && j.value("root", "") == n.root &&
            (started_pid_ <= 0 || pid == started_pid_)) {
          r_.agent_version = j.value("version", "");
          progress_("health", "tandemd " + r_.agent_version + " answers");
          return {};
        }
        // Another agent on that port (an old one, or another node's): not the one just started.
        last = "an agent answered, but not the one just started (pid " + std::to_string(started_pid_) +
               "): pid " + std::to_string(pid) + ", node '" + (j.is_object() ? j.value("node", "?") : "?") +
               "', root '" + (j.is_object() ? j.value("root", "?") : "?") + "'";
      }
      std::this_thread::sleep_for(200ms);
    }
    std::string log;
    if (auto l = session_->exec(plan_.log_command, 20s); l && !l->out.empty()) log = "\nthe agent's log:\n" + trimmed(l->out);
    return Error{"tandemd did not answer within " + std::to_string(o_.health_timeout.count()) + " s: " + last + log};
  }

  const NodePlan& plan_;
  const RunOptions& o_;
  const Progress& progress_;
  NodeReport& r_;
  std::unique_ptr<ssh::Session> session_;
  long started_pid_ = 0;  // as the start command reported it; health must name the same
};

}  // namespace

NodeReport enroll_node(const NodePlan& plan, const RunOptions& o, const Progress& progress) {
  NodeReport r;
  r.node = plan.node->name;
  Runner(plan, o, progress, r).run();
  return r;
}

}  // namespace tandem::enroll
