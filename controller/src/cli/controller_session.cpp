#include "controller_session.hpp"

#include <unistd.h>

#include <cstdlib>

namespace tandem::ctl {

std::string default_state_dir() {
  if (::geteuid() == 0) return "/var/lib/tandemctl";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/tandemctl";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/tandemctl";
  return "/tmp/tandemctl-" + std::to_string(::geteuid());
}

void add_controller_options(CLI::App* cmd, ControllerDirs& dirs) {
  dirs.state_dir = default_state_dir();
  dirs.pki_dir = "/etc/tandem/pki";
  cmd->add_option("--state-dir", dirs.state_dir,
                  "Controller state: the lock, and per bind name its journal and reports (a killed bind resumes from it)")
      ->envname("TANDEM_STATE_DIR")
      ->capture_default_str();
  cmd->add_option("--pki-dir", dirs.pki_dir, "Cluster PKI from `tandemctl pki init` (ca.pem, controller.pem/.key)")
      ->envname("TANDEM_PKI_DIR")
      ->capture_default_str();
}

void add_stage_root_option(CLI::App* cmd, ControllerDirs& dirs) {
  cmd->add_option("--stage-root", dirs.stage_root,
                  "stage.from: controller: the staged paths are read on this machine under this prefix (only "
                  "those paths; nothing else is opened)")
      ->envname("TANDEM_STAGE_ROOT")
      ->capture_default_str();
}

Result<std::shared_ptr<StagePush>> open_stage_push(const Session& s, const ControllerDirs& dirs) {
  return StagePush::open(s.m, dirs.stage_root, s.bind_dir + "/stage-source-sha256-cache.json");
}

Result<Session> open_session(const cli::ManifestArg& arg, const ControllerDirs& dirs, const char* lock_verb) {
  auto loaded = cli::load(arg);
  if (!loaded.manifest) std::exit(cli::report_errors(loaded, arg.output));
  Session s{*loaded.manifest, {}, {}, {}, std::nullopt, nullptr, {}};
  // The very bytes that were validated (not a second read of the path, which could have changed
  // or become a FIFO since): the agents validate and run this text.
  s.yaml = std::move(loaded.text);
  s.sha256 = sha256_hex(s.yaml);
  auto dir = bind_dir(dirs.state_dir, s.m.name);
  if (!dir) return dir.error();
  s.bind_dir = std::move(dir.value());
  if (lock_verb) {
    auto lock = StateLock::acquire(dirs.state_dir, std::string(lock_verb) + " " + s.m.name);
    if (!lock) return lock.error();
    s.lock.emplace(std::move(lock.value()));
  }
  auto journal = BindJournal::open(s.bind_dir);
  if (!journal) return journal.error();
  s.journal = std::make_unique<BindJournal>(std::move(journal.value()));
  for (const auto& n : s.m.nodes) {
    auto c = AgentClient::create(dirs.pki_dir, n);
    if (!c) return c.error();
    s.agents.emplace(n.name, std::move(c.value()));
  }
  return s;
}

std::unique_ptr<Progress> session_progress(const Session& s, bool as_json, bool controller_row, int total) {
  std::vector<std::string> rows;
  for (const Node* n : s.m.start_order()) rows.push_back(n->name);
  if (controller_row) rows.push_back("controller");
  std::FILE* out = as_json ? stderr : stdout;
  return std::make_unique<Progress>(Progress::pick(as_json, out), out, std::move(rows), total);
}

}  // namespace tandem::ctl
