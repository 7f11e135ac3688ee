// tandemd: the node agent. `serve` answers the controller over mutual TLS; `restore` and
// `deadman-fire` are what the dead-man runs, with or without a live daemon.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <csignal>
#include <iostream>
#include <mutex>

#include "cli_conventions.hpp"
#include "daemon.hpp"
#include "logging.hpp"
#include "node_certificate.hpp"
#include "restore.hpp"
#include "routes.hpp"
#include "tandem/net/https_server.hpp"
#include "tandem/net/pki.hpp"
#include "tandem/supervise/deadman_fire.hpp"
#include "tandem/build_info.hpp"

namespace {

std::string self_path(const char* argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int sig) { g_stop = sig; }

void node_options(CLI::App* cmd, tandem::agentd::DaemonOptions& o) {
  // An installed but unenrolled node starts with TANDEMD_NODE= empty in /etc/tandem/tandemd.env.
  const CLI::Validator named(
      [](std::string& v) {
        return v.empty() ? std::string("the node name is empty (tandemd.service reads it as TANDEMD_NODE from "
                                       "/etc/tandem/tandemd.env, which `tandemctl enroll` writes)")
                         : std::string();
      },
      "NAME");
  cmd->add_option("--node", o.node, "This node's name in the manifest (and its certificate CN)")->required()->check(named);
  cmd->add_option("--root", o.root, "Resolve host paths under this prefix (sandboxed test nodes)")->check(CLI::ExistingDirectory);
  cmd->add_option("--state-dir", o.state_dir_host, "State directory as the node sees it (under --root)");
}

void finish_paths(tandem::agentd::DaemonOptions& o) {
  o.state_dir = o.root == "/" ? o.state_dir_host : o.root + o.state_dir_host;
}

struct ServeArgs {
  std::string listen = "0.0.0.0:7443";
  std::string pki_dir = "/etc/tandem/pki";
  std::vector<std::string> allow;
  // A pushed stage holds one for its apply and up to stage.parallel for its chunks at once.
  unsigned threads = 8;
};

// `tandemd serve`: open the daemon, listen with mutual TLS, serve until SIGTERM or SIGINT.
[[noreturn]] void serve_agent(tandem::agentd::DaemonOptions& opts, const ServeArgs& a) {
  finish_paths(opts);
  opts.pki_dir = a.pki_dir;
  for (const auto& exe : a.allow) {
    if (exe.empty() || exe.front() != '/') {
      spdlog::error("--allow-exec needs an absolute path, got '{}'", exe);
      std::exit(tandem::cli::kExitUsage);
    }
    opts.allow_exec.insert(exe);
  }
  std::string err;
  auto daemon = tandem::agentd::Daemon::open(opts, err);
  if (!daemon) {
    spdlog::error("{}", err);
    std::exit(1);
  }
  const auto colon = a.listen.rfind(':');
  const std::string port_text = colon == std::string::npos ? std::string() : a.listen.substr(colon + 1);
  unsigned long port = 0;
  const bool port_ok = !port_text.empty() && port_text.size() <= 5 &&
                       port_text.find_first_not_of("0123456789") == std::string::npos &&
                       (port = std::stoul(port_text)) <= 65535;
  if (!port_ok) {
    spdlog::error("--listen must be ADDRESS:PORT with a port of 0 to 65535, got {}", a.listen);
    std::exit(tandem::cli::kExitUsage);
  }
  tandem::net::PkiLayout pki{a.pki_dir};
  if (auto cert = tandem::agentd::check_node_certificate(pki, opts.node); !cert) {
    spdlog::error("{}", cert.error().message);
    std::exit(1);
  }
  tandem::net::ServerOptions so;
  so.address = a.listen.substr(0, colon);
  so.port = static_cast<std::uint16_t>(port);
  so.ca_file = pki.ca_cert();
  so.cert_file = pki.node_cert(opts.node);
  so.key_file = pki.node_key(opts.node);
  so.allowed_client_cns = {"controller"};
  // The stage source routes answer other nodes' agents too; the daemon checks their CN there.
  so.peer_prefix = "/v1/stage/source/";
  so.threads = a.threads;
  // A pushed stage chunk (stage.from: controller) is a request body of up to 64 MiB, and a pushed
  // listing of a large model more than 1 MiB; every other request keeps the 1 MiB limit.
  so.large_body_prefix = "/v1/stage/push/";
  so.large_body_limit = tandem::agent::kMaxStageRead + (1 << 20);
  auto server = tandem::net::HttpsServer::start(so, tandem::agentd::make_router(*daemon));
  if (!server) {
    spdlog::error("{}", server.error().message);
    std::exit(1);
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  spdlog::info("{}: node {} serving on {}:{} (mutual TLS), state {}", tandem::version_text("tandemd"), opts.node,
               so.address, server.value()->port(), opts.state_dir);
  while (!g_stop) ::pause();
  spdlog::info("stopping on {}", g_stop == SIGTERM ? "SIGTERM" : "SIGINT");
  server.value()->stop();
  std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = tandem::cli::handle_version(argc, argv, "tandemd")) return *rc;
  CLI::App app{"tandemd: the tandem node agent. It runs the hygiene checklist with exact undo, supervises the\n"
               "engine rank and owns the dead-man, and answers only tandemctl, over mutual TLS.",
               "tandemd"};
  app.footer("Exit status: 0 a clean stop (SIGTERM or SIGINT) or done; 1 failed (state directory, certificates,\n"
             "listening socket, a restore or dead-man step); 2 usage error (unknown command or flag, a bad value).");
  tandem::cli::add_version_flag(app);
  tandem::cli::LogOptions log;
  tandem::cli::add_log_flags(app, log);
  app.require_subcommand(1);
  app.parse_complete_callback([&log] { tandem::cli::setup_logging("tandemd", log); });

  tandem::agentd::DaemonOptions opts;
  opts.tandemd_path = self_path(argv[0]);
  ServeArgs sa;

  auto* serve = app.add_subcommand("serve", "Serve the agent API (HTTPS, client certificates required)");
  node_options(serve, opts);
  serve->add_option("--listen", sa.listen, "ADDRESS:PORT to listen on");
  serve->add_option("--pki-dir", sa.pki_dir, "Directory with ca.pem and nodes/NODE.pem/.key (from `tandemctl pki init`)");
  serve->add_option("--allow-exec", sa.allow,
                    "An executable a manifest may name (engine binary, stop and rollback commands), as the node "
                    "sees it (under --root); repeat for each");
  serve->add_option("--threads", sa.threads, "Request threads")->check(CLI::Range(1, 64));
  serve->callback([&] { serve_agent(opts, sa); });

  auto* restore = app.add_subcommand("restore", "Stop the engine rank and undo this node's hygiene steps (run by the dead-man)");
  node_options(restore, opts);
  restore->callback([&] {
    finish_paths(opts);
    std::exit(tandem::agentd::run_restore(opts));
  });

  std::string fire_dir;
  auto* fire = app.add_subcommand("deadman-fire", "Run a dead-man's rollback commands now, at most once (what its timer runs)");
  fire->add_option("--state-dir", fire_dir, "The dead-man's state directory")->required()->check(CLI::ExistingDirectory);
  fire->callback([&] {
    auto r = tandem::supervise::deadman_fire(fire_dir);
    if (!r) {
      spdlog::error("deadman-fire: {}", r.error().message);
      std::exit(1);
    }
    std::cout << (r.value().fired_now ? "fired" : "not fired: " + r.value().reason) << "\n";
    std::exit(0);
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tandem::cli::usage_exit(app, e, argc, argv);
  }
  return 0;
}
