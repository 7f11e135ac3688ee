#include "restore.hpp"

#include <iostream>

#include "tandem/supervise/atomic_file.hpp"
#include "tandem/supervise/rank_supervisor.hpp"

namespace tandem::agentd {

Result<std::unique_ptr<agent::AgentCore>> open_core(const Manifest& m, const DaemonOptions& opts,
                                                           std::shared_ptr<agent::StageSource> source,
                                                           std::shared_ptr<agent::StageProgress> progress) {
  agent::CoreOptions c;
  c.root = opts.root;
  c.state_dir = opts.state_dir_host;
  c.engine = m.engine;
  c.hygiene = m.hygiene;
  std::vector<Command> mine;
  for (const auto& n : m.nodes)
    if (n.name == opts.node)
      for (const auto& cmd : m.hygiene.stop)
        if (m.selects(cmd, n)) mine.push_back(cmd);
  c.stop_commands = mine;
  c.stage = m.stage;
  c.staged_paths = m.staged_paths();
  c.stage_source = std::move(source);
  c.stage_progress = std::move(progress);
  return agent::AgentCore::open(c);
}

Manifest rebase_engine_paths(const Manifest& m, const std::string& root) {
  if (root == "/" || root.empty()) return m;
  Manifest r = m;
  auto under = [&](std::string& p) {
    if (!p.empty()) p = root + p;
  };
  under(r.engine.binary);
  under(r.engine.model_dir);
  under(r.engine.drafter_dir);
  under(r.engine.cache_dir);
  under(r.engine.serve.chat_template);
  if (r.engine.serve.speculative) under(r.engine.serve.speculative->model);
  return r;
}

Command restore_command(const DaemonOptions& opts) {
  Command c;
  c.on = opts.node;
  c.run = {opts.tandemd_path, "restore", "--node", opts.node, "--root", opts.root, "--state-dir", opts.state_dir_host};
  c.timeout = std::chrono::minutes(5);
  return c;
}

int run_restore(const DaemonOptions& opts) {
  nlohmann::json report{{"node", opts.node}};
  int rc = 0;
  auto rank = supervise::RankSupervisor::open(opts.state_dir + "/rank");
  if (!rank) {
    report["engine"] = {{"error", rank.error().message}};
    rc = 1;
  } else {
    auto st = rank.value()->stop(std::chrono::seconds(10));
    report["engine"] = st ? nlohmann::json{{"stopped", supervise::to_string(st.value().phase)}}
                          : nlohmann::json{{"error", st.error().message}};
    if (!st) rc = 1;
  }
  auto stored = supervise::read_file_if_exists(opts.state_dir + "/manifest.yaml");
  if (!stored || !stored.value()) {
    report["hygiene"] = {{"error", "no stored manifest in " + opts.state_dir + ": nothing to undo"}};
  } else {
    auto loaded = load_manifest_text(*stored.value(), opts.state_dir + "/manifest.yaml");
    if (!loaded.manifest) {
      report["hygiene"] = {{"error", "the stored manifest no longer parses"}};
      rc = 1;
    } else {
      auto core = open_core(*loaded.manifest, opts);
      if (!core) {
        report["hygiene"] = {{"error", core.error().text()}};
        rc = 1;
      } else {
        auto undone = core.value()->undo_incomplete();
        report["hygiene"] = undone ? undone.value() : agent::to_json(undone.error());
        if (!undone) rc = 1;
      }
    }
  }
  std::cout << report.dump(2) << "\n";
  return rc;
}

}  // namespace tandem::agentd
