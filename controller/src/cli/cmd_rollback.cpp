// tandemctl rollback / disarm: the operator's hands on the dead-man and the old lane.
#include <iostream>

#include "bind/bind_report.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"
#include "bind/rollback_runner.hpp"

namespace tandem::cli {
namespace {

using ctl::json;

struct RollbackOpts {
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
  bool local = false;
};

int rollback(const RollbackOpts& o) {
  const bool as_json = o.manifest.output == "json";
  auto session = ctl::open_session(o.manifest, o.dirs, "rollback");
  if (!session) {
    std::cerr << "tandemctl rollback: " << session.error().message << "\n";
    return kExitFailed;
  }
  ctl::Session& s = *session;
  Plan plan = make_plan(s.m);
  auto last = ctl::last_run(*s.journal);
  ctl::BindRun run;
  bool fresh = true;
  // An unfinished bind is rolled back under its own id (its op ids, its journal). --local needs
  // the last bind's record even when it finished: that record is all it works from.
  if (last && (!last->finished() || o.local)) {
    run = *last;
    run.result.reset();
    fresh = false;
  } else if (o.local) {
    std::cerr << "tandemctl rollback --local: " << s.bind_dir << " records no bind of '" << s.m.name
              << "'; without the agents there is nothing this controller knows to undo\n";
    return kExitFailed;
  } else {
    run.bind_id = ctl::new_bind_id();
  }
  const auto shown = ctl::session_progress(s, as_json, true, 0);
  ctl::Progress& progress = *shown;
  ctl::BindContext ctx{s.m, s.yaml, plan, s.agents, *s.journal, run, progress, s.bind_dir, false, {}, {}, nullptr};
  if (fresh && !ctx.record({{"event", "bind.begin"}, {"kind", "rollback"}, {"manifest_sha256", s.sha256},
                            {"manifest_file", display_name(o.manifest)}, {"steps", 0}})) {
    std::cerr << "tandemctl rollback: cannot write the journal in " << s.bind_dir << "\n";
    return kExitFailed;
  }
  (void)ctx.record({{"event", "rollback.begin"}, {"reason", std::string("operator: tandemctl rollback") + (o.local ? " --local" : "")}});
  progress.line("rolling back '" + s.m.name + "' (" + ctx.run.bind_id + ") from " +
                (o.local ? "this controller's journal only" : "the agents' journals"));
  ctl::RollbackResult r = ctl::run_rollback(ctx, o.local ? ctl::RollbackSource::local : ctl::RollbackSource::agents);
  const std::string result = r.ok ? "rolled_back" : "rollback_failed";
  auto files = ctl::write_report(ctx, result);
  (void)ctx.record({{"event", "bind.end"}, {"result", result}});
  progress.finish();
  if (as_json) {
    std::cout << json{{"result", result}, {"bind_id", ctx.run.bind_id}, {"problems", r.problems},
                      {"report", files ? json{{"markdown", files->markdown}, {"json", files->json}} : json(nullptr)}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << (r.ok ? "\nrolled back: the old lane answers at " + s.m.rollback.verify.url + "\n" : "\nROLLBACK INCOMPLETE:\n");
    for (const auto& p : r.problems) std::cout << "  - " << p << "\n";
    if (files) std::cout << "report: " << files->markdown << "\n";
  }
  return r.ok ? 0 : kExitFailed;
}

struct DisarmOpts {
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
};

int disarm(const DisarmOpts& o) {
  auto session = ctl::open_session(o.manifest, o.dirs, "disarm");
  if (!session) {
    std::cerr << "tandemctl disarm: " << session.error().message << "\n";
    return kExitFailed;
  }
  const std::string op = "disarm-" + ctl::new_bind_id();
  json nodes = json::array();
  bool ok = true;
  for (const auto& n : session->m.nodes) {
    ctl::AgentReply r = session->agents.at(n.name).deadman_disarm(op);
    const bool nothing = !r.ok && r.status == 409 && r.error.find("nothing armed") != std::string::npos;
    ok = ok && (r.ok || nothing);
    json d = r.ok ? r.body.value("deadman", json()) : json(nullptr);
    nodes.push_back({{"node", n.name}, {"ok", r.ok || nothing}, {"error", r.ok || nothing ? "" : r.error},
                     {"armed", r.ok ? d.value("armed", false) : false}});
    if (o.manifest.output != "json") {
      if (r.ok || nothing) std::cout << n.name << ": dead-man " << (nothing ? "was not armed" : "disarmed") << "\n";
      else std::cerr << n.name << ": " << r.error << "\n";
    }
  }
  if (o.manifest.output == "json") std::cout << json{{"nodes", nodes}, {"ok", ok}}.dump(2) << "\n";
  return ok ? 0 : kExitFailed;
}

}  // namespace

void add_rollback_commands(CLI::App& app) {
  auto ro = std::make_shared<RollbackOpts>();
  auto* rb = app.add_subcommand("rollback", "Put the old lane back: stop the ranks, undo in reverse, start and verify the rollback lane");
  add_manifest_arg(rb, ro->manifest);
  ctl::add_controller_options(rb, ro->dirs);
  rb->add_flag("--local", ro->local,
               "Work only from this controller's journal (the ops its last bind applied), on the agents that\n"
               "answer; for when some agents are unreachable. Unreachable nodes are listed, not touched:\n"
               "their armed dead-men restore them. Exit 3 if any node was left out.");
  rb->footer(
      "Without --local, each agent's own journal says what to undo: every change not yet undone, even\n"
      "from a bind whose controller state is lost. Order: stop the engine ranks (head first), undo\n"
      "(crontabs come back byte for byte), run the manifest's rollback commands, GET rollback.verify.url\n"
      "until it answers 200, and only then disarm the dead-men (if the old lane does not verify they stay\n"
      "armed and try again at their deadline). An unfinished bind is rolled back under its own id.");
  rb->callback([ro] { std::exit(rollback(*ro)); });

  auto dopts = std::make_shared<DisarmOpts>();
  auto* ds = app.add_subcommand("disarm", "Disarm the dead-man on every node (keep the new lane; nothing is rolled back)");
  add_manifest_arg(ds, dopts->manifest);
  ctl::add_controller_options(ds, dopts->dirs);
  ds->footer("A dead-man that already fired cannot be disarmed: its rollback has run (exit 3, says so).");
  ds->callback([dopts] { std::exit(disarm(*dopts)); });
}

}  // namespace tandem::cli
