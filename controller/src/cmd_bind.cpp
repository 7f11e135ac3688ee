// tandemctl bind: run the plan against the agents, resume a killed bind, roll back on failure.
#include <iostream>

#include "bind_runner.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"

namespace tandem::cli {
namespace {

using ctl::json;

struct BindOpts {
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
};

int bind(const BindOpts& o) {
  const bool as_json = o.manifest.output == "json";
  auto session = ctl::open_session(o.manifest, o.dirs, "bind");
  if (!session) {
    std::cerr << "tandemctl bind: " << session.error().message << "\n";
    return kExitFailed;
  }
  ctl::Session& s = *session;
  Plan plan = make_plan(s.m);
  auto last = ctl::last_run(*s.journal);
  ctl::BindRun run;
  bool resumed = false;
  if (last && !last->finished()) {
    if (last->manifest_sha256 != s.sha256) {
      std::cerr << "tandemctl bind: " << last->kind << " " << last->bind_id << " of '" << s.m.name
                << "' is unfinished and used a different manifest (" << last->manifest_file << ", sha256 "
                << last->manifest_sha256.substr(0, 12) << "); finish it with that manifest, or `tandemctl rollback`\n";
      return kExitFailed;
    }
    run = *last;
    resumed = true;
  } else {
    run.bind_id = ctl::new_bind_id();
  }
  std::vector<std::string> rows;
  for (const Node* n : s.m.start_order()) rows.push_back(n->name);
  rows.push_back("controller");
  std::FILE* out = as_json ? stderr : stdout;
  ctl::Progress progress(ctl::Progress::pick(as_json, out), out, rows, static_cast<int>(plan.steps.size()));
  ctl::BindContext ctx{s.m, s.yaml, plan, s.agents, *s.journal, run, progress, s.bind_dir, false, {}};
  if (resumed) {
    int done = 0;
    for (const auto& [i, r] : ctx.run.steps) done += r.done;
    progress.line("resuming bind " + ctx.run.bind_id + " of '" + s.m.name + "': " + std::to_string(done) + " of " +
                  std::to_string(plan.steps.size()) + " steps already done");
  } else {
    auto st = ctx.record({{"event", "bind.begin"}, {"kind", "bind"}, {"manifest_sha256", s.sha256},
                          {"manifest_file", display_name(o.manifest)}, {"steps", plan.steps.size()}});
    if (!st) {
      std::cerr << "tandemctl bind: " << st.error().message << "\n";
      return kExitFailed;
    }
    progress.line("bind " + ctx.run.bind_id + " of '" + s.m.name + "': " + std::to_string(plan.steps.size()) +
                  " steps on " + std::to_string(s.m.nodes.size()) + " nodes (journal " + s.journal->path() + ")");
  }
  ctl::BindResult r = ctl::run_bind(ctx);
  progress.finish();
  if (as_json) {
    std::cout << json{{"result", r.result},
                      {"bind_id", ctx.run.bind_id},
                      {"resumed", resumed},
                      {"failed_step", r.failed_step},
                      {"rollback_problems", r.rollback_problems},
                      {"report", {{"markdown", r.report_markdown}, {"json", r.report_json}}}}
                     .dump(2)
              << "\n";
  } else if (r.ok()) {
    std::cout << "\nbound: '" << s.m.name << "' serves at http://" << s.m.head().address << ":" << s.m.engine.serve.port
              << "; dead-men disarmed.\nreport: " << r.report_markdown << "\n";
  } else {
    const json& f = r.failed_step;
    std::cerr << "\nbind failed";
    if (f.is_object())
      std::cerr << " at step " << f.value("index", 0) << " (" << f.value("action", "") << ") on " << f.value("node", "")
                << ": " << f.value("error", "");
    std::cerr << "\n"
              << (r.result == "failed_unchanged" ? "nothing was changed on any node (preflight only reads).\n"
                  : r.result == "rolled_back"    ? "rolled back: the old lane answers again.\n"
                                                 : "ROLLBACK INCOMPLETE; what is left:\n");
    for (const auto& p : r.rollback_problems) std::cerr << "  - " << p << "\n";
    if (!r.report_markdown.empty()) std::cerr << "report: " << r.report_markdown << "\n";
  }
  return r.ok() ? 0 : kExitFailed;
}

}  // namespace

void add_bind_command(CLI::App& app) {
  auto o = std::make_shared<BindOpts>();
  auto* cmd = app.add_subcommand("bind", "Bind the new lane: run every step of `tandemctl plan` on the agents, roll back on failure");
  add_manifest_arg(cmd, o->manifest);
  ctl::add_controller_options(cmd, o->dirs);
  cmd->footer(
      "Runs exactly the steps `tandemctl plan` prints, in order: preflight, arm the dead-men, cron and\n"
      "stop (the outage), hygiene, compare SHA-256 across ranks and pins (a mismatch stops before\n"
      "launch and names the files), start the workers then the head, wait for /health, gates, disarm,\n"
      "report. Any failure runs the rollback: stop the ranks, undo in reverse, start the old lane,\n"
      "verify it, then disarm. Exit 0 only when bound; 3 when the bind failed (rolled back or not).\n\n"
      "Every step is journaled (fsynced) under --state-dir before it acts: run `tandemctl bind` again\n"
      "after a killed controller and it continues where it stopped (agents replay calls by op id).\n"
      "Only one bind/rollback/disarm runs at a time; a second one is refused and names the first's pid.\n"
      "The report (Markdown and JSON) goes to STATE_DIR/<bind name>/reports/<bind id>.{md,json}.");
  cmd->callback([o] { std::exit(bind(*o)); });
}

}  // namespace tandem::cli
