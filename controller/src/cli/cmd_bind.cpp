// tandemctl bind: run the plan against the agents, resume a killed bind, roll back on failure.
#include <unistd.h>

#include <functional>
#include <iostream>
#include <optional>

#include "bind/bind_runner.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"
#include "plan/saved_plan.hpp"

namespace tandem::cli {
namespace {

using ctl::json;

struct BindOpts {
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
  bool yes = false;
  std::string checked_sha256;  // a saved plan's manifest, as checked against the plan
};

// "y" or "yes" on a terminal, asked after preflight and before the first change.
std::function<bool()> terminal_confirmation(const BindOpts& o, const ctl::Session& s, ctl::Progress& progress) {
  if (o.yes || o.manifest.output == "json" || !isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return {};
  return [&s, &progress] {
    std::string answer;
    const std::string q = "Preflight passed. Next: arm the dead-men, then the outage (stop the old lane on " +
                          std::to_string(s.m.nodes.size()) + " nodes). Proceed? [y/N] ";
    if (!progress.ask(q, stdin, answer)) return false;
    return answer == "y" || answer == "Y" || answer == "yes";
  };
}

// `tandemctl bind plan.json`: the manifest the plan names, refused (before any lock or agent is
// touched) if it, its nodes, its pins or the steps made from it changed since the plan was saved.
// nullopt: go on with o.manifest (now the plan's manifest, when it was a plan).
std::optional<int> use_saved_plan(BindOpts& o) {
  if (o.manifest.path.empty()) return std::nullopt;
  auto text = read_manifest_file(o.manifest.path);
  if (!text || !is_saved_plan(*text)) return std::nullopt;  // a manifest: load() reports its problems
  const std::string plan_file = o.manifest.path;
  auto saved = parse_saved_plan(*text, plan_file);
  if (!saved) {
    std::cerr << "tandemctl bind: " << saved.error().message << "\n";
    return kExitInvalid;
  }
  auto r = load_manifest_file(saved->manifest_path);
  if (!r.manifest) {
    std::cerr << "tandemctl bind: the saved plan " << plan_file << " was made from " << saved->manifest_path
              << ", which does not load now:\n";
    return report_errors(r, o.manifest.output);
  }
  const auto changes = saved_plan_changes(*saved, *r.manifest, ctl::sha256_hex(r.text), make_plan(*r.manifest));
  if (!changes.empty()) {
    std::cerr << "tandemctl bind: the saved plan " << plan_file << " no longer matches " << saved->manifest_path
              << "; nothing was run. What changed since it was made:\n";
    for (const auto& c : changes) std::cerr << "  - " << c << "\n";
    std::cerr << "Review the new plan and save it again: tandemctl plan " << saved->manifest_path << " --out " << plan_file << "\n";
    return kExitInvalid;
  }
  o.manifest.path = saved->manifest_path;
  o.checked_sha256 = ctl::sha256_hex(r.text);
  return std::nullopt;
}

// The outcome: JSON on stdout, or a line for a person (where it serves, or where it stopped and
// what the rollback left).
void print_result(const ctl::BindResult& r, const std::string& bind_id, const Manifest& m, bool resumed, bool as_json) {
  if (as_json) {
    std::cout << json{{"result", r.result},
                      {"bind_id", bind_id},
                      {"resumed", resumed},
                      {"failed_step", r.failed_step},
                      {"rollback_problems", r.rollback_problems},
                      {"report", {{"markdown", r.report_markdown}, {"json", r.report_json}, {"html", r.report_html}}}}
                     .dump(2)
              << "\n";
  } else if (r.ok()) {
    std::cout << "\nbound: '" << m.name << "' serves at http://" << m.head().address << ":" << m.engine.serve.port
              << "; dead-men disarmed.\nreport: " << r.report_html << " (also .md, .json)\n";
  } else if (r.result == "aborted") {
    std::cerr << "\nbind aborted at the prompt: nothing was changed on any node (preflight only reads).\n";
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
    if (!r.report_html.empty()) std::cerr << "report: " << r.report_html << " (also .md, .json)\n";
  }
}

int bind(BindOpts o) {
  const bool as_json = o.manifest.output == "json";
  if (auto rc = use_saved_plan(o)) return *rc;
  auto session = ctl::open_session(o.manifest, o.dirs, "bind");
  if (!session) {
    std::cerr << "tandemctl bind: " << session.error().message << "\n";
    return kExitFailed;
  }
  ctl::Session& s = *session;
  // The session read the manifest again: it must still be the bytes the saved plan was checked on.
  if (!o.checked_sha256.empty() && s.sha256 != o.checked_sha256) {
    std::cerr << "tandemctl bind: " << o.manifest.path << " changed while bind started; nothing was run\n";
    return kExitInvalid;
  }
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
  const auto shown = ctl::session_progress(s, as_json, true, static_cast<int>(plan.steps.size()));
  ctl::Progress& progress = *shown;
  auto push = ctl::open_stage_push(s, o.dirs);
  if (!push) {
    std::cerr << "tandemctl bind: " << push.error().message << "\n";
    return kExitFailed;
  }
  ctl::BindContext ctx{s.m, s.yaml, plan, s.agents, *s.journal, run, progress, s.bind_dir, false, {},
                       terminal_confirmation(o, s, progress), *push};
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
  print_result(r, ctx.run.bind_id, s.m, resumed, as_json);
  return r.ok() ? 0 : kExitFailed;
}

}  // namespace

void add_bind_command(CLI::App& app) {
  auto o = std::make_shared<BindOpts>();
  auto* cmd = app.add_subcommand("bind", "Bind the new lane: run every step of `tandemctl plan` on the agents, roll back on failure");
  add_manifest_arg(cmd, o->manifest);
  cmd->get_option("manifest")->description(
      "Bind manifest (YAML), or a plan saved by `tandemctl plan M.yaml --out FILE` (then exactly that plan runs, and "
      "bind refuses it if the manifest, its nodes or its pins changed since). Omitted: the embedded default.");
  ctl::add_controller_options(cmd, o->dirs);
  ctl::add_stage_root_option(cmd, o->dirs);
  cmd->footer(
      "Runs exactly the steps `tandemctl plan` prints, in order: preflight, arm the dead-men, cron and\n"
      "stop (the outage), hygiene, compare SHA-256 across ranks and pins (a mismatch stops before\n"
      "launch and names the files), start the workers then the head, wait for /health, gates, disarm,\n"
      "report. Any failure runs the rollback: stop the ranks, undo in reverse, start the old lane,\n"
      "verify it, then disarm. Exit 0 only when bound; 3 when the bind failed (rolled back or not).\n\n"
      "Every step is journaled (fsynced) under --state-dir before it acts: run `tandemctl bind` again\n"
      "after a killed controller and it continues where it stopped (agents replay calls by op id).\n"
      "Only one bind/rollback/disarm runs at a time; a second one is refused and names the first's pid.\n"
      "On a terminal, bind asks before it arms the dead-men and starts the outage (after preflight); --yes\n"
      "skips the question, and so does anything not a terminal (scripts, CI, -o json). A \"no\" ends the\n"
      "bind as aborted with nothing changed.\n"
      "The report (HTML with the timeline, Markdown and JSON) goes to STATE_DIR/<bind name>/reports/<bind id>.{html,md,json};\n"
      "`tandemctl history` lists past binds, `tandemctl report BIND_ID` finds one's report.");
  cmd->add_flag("-y,--yes", o->yes, "Do not ask before the outage (bind asks only on a terminal; scripts and -o json never)");
  cmd->callback([o] { std::exit(bind(*o)); });
}

}  // namespace tandem::cli
