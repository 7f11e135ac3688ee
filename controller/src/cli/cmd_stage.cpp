// tandemctl stage: the stage phase of a bind on its own (preflight, then stage.files on every node
// but the head), to carry files ahead of a bind while the old lane serves. Equal files are
// skipped, so the bind's own stage step then finds nothing to copy.
#include <iostream>

#include "tandem/units.hpp"

#include "bind/bind_steps.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"

namespace tandem::cli {
namespace {

using ctl::json;

struct StageOpts {
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
  bool release = false;
};

// --release-backups: every node frees the backups its verified stage ops keep (their files stay
// as staged; those ops can no longer be undone). A successful bind does this for older stages.
int release_backups(ctl::Session& s, bool as_json) {
  json nodes = json::array();
  bool ok = true;
  for (const Node* n : s.m.start_order()) {
    ctl::AgentReply r = s.agents.at(n->name).stage_release({});
    nodes.push_back({{"node", n->name}, {"ok", r.ok}, {"error", r.error}, {"evidence", r.ok ? r.body : r.evidence}});
    ok = ok && r.ok;
    if (as_json) continue;
    if (!r.ok) {
      std::cerr << n->name << ": " << r.error << "\n";
      continue;
    }
    std::cout << n->name << ": " << r.body.value("released", json::array()).size() << " stage ops released, "
              << format_size(r.body.value("freed_bytes", 0ull)) << " freed";
    if (auto k = r.body.value("kept", json::array()); !k.empty())
      std::cout << "; " << k.size() << " kept (not verified: they may still need undoing)";
    std::cout << "\n";
  }
  if (as_json) std::cout << json{{"result", ok ? "released" : "failed"}, {"nodes", nodes}}.dump(2) << "\n";
  return ok ? 0 : kExitFailed;
}

int stage(const StageOpts& o) {
  const bool as_json = o.manifest.output == "json";
  auto session = ctl::open_session(o.manifest, o.dirs, "stage");
  if (!session) {
    std::cerr << "tandemctl stage: " << session.error().message << "\n";
    return kExitFailed;
  }
  ctl::Session& s = *session;
  if (o.release) return release_backups(s, as_json);
  if (!s.m.stage) {
    std::cerr << "tandemctl stage: " << display_name(o.manifest)
              << " has no stage section; nothing to stage (manifests/README.md, `stage`)\n";
    return kExitInvalid;
  }
  Plan full = make_plan(s.m);
  Plan plan = full;
  plan.steps.clear();
  for (const auto& st : full.steps)
    if (st.phase == "preflight" || st.phase == "stage") plan.steps.push_back(st);
  const auto shown = ctl::session_progress(s, as_json, false, static_cast<int>(plan.steps.size()));
  ctl::Progress& progress = *shown;
  // Op ids of their own ("stage-<time>-<step>"), never a bind's: nothing is written to the bind
  // journal, so a later bind starts fresh and finds the files equal.
  ctl::BindRun run;
  run.bind_id = "stage-" + ctl::new_bind_id();
  auto push = ctl::open_stage_push(s, o.dirs);
  if (!push) {
    std::cerr << "tandemctl stage: " << push.error().message << "\n";
    return kExitFailed;
  }
  ctl::BindContext ctx{s.m, s.yaml, full, s.agents, *s.journal, run, progress, s.bind_dir, false, {}, {}, *push};
  json results = json::array();
  bool ok = true;
  for (const auto& st : plan.steps) {
    progress.begin(st.index, st.node, st.id(), st.summary);
    const auto t0 = std::chrono::steady_clock::now();
    ctl::StepOutcome r = ctl::run_step(ctx, st);
    const long long ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (r.ok) progress.done(st.index, st.node, st.id(), r.note, ms);
    else progress.failed(st.index, st.node, st.id(), r.error);
    results.push_back({{"node", st.node}, {"action", st.id()}, {"op_id", ctx.op_for_step(st.index)}, {"ok", r.ok},
                       {"error", r.error}, {"evidence", r.evidence}, {"ms", ms}});
    if (!r.ok) {
      ok = false;
      break;
    }
  }
  progress.finish();
  if (as_json) {
    std::cout << json{{"result", ok ? "staged" : "failed"}, {"steps", results}}.dump(2) << "\n";
  } else if (ok) {
    std::cout << "\nstaged: every node's engine files equal "
              << (s.m.stage->from == Stage::From::controller ? std::string("this machine's (under --stage-root ") + o.dirs.stage_root + ")"
                                                              : s.m.head().name + "'s")
              << ". `tandemctl rollback` puts the replaced files back.\n";
  } else {
    std::cerr << "\nstage failed: " << results.back().value("error", "")
              << "\nrecorded chunks stay beside their targets: `tandemctl stage` or `bind` again resumes them;"
                 " `tandemctl rollback` puts back what was replaced.\n";
  }
  return ok ? 0 : kExitFailed;
}

}  // namespace

void add_stage_command(CLI::App& app) {
  auto o = std::make_shared<StageOpts>();
  auto* cmd = app.add_subcommand("stage", "Copy the engine, pinned configs, model and drafter from the head (or this machine) to every node");
  add_manifest_arg(cmd, o->manifest);
  ctl::add_controller_options(cmd, o->dirs);
  ctl::add_stage_root_option(cmd, o->dirs);
  cmd->add_flag("--release-backups", o->release,
                "Copy nothing: free the backups every node keeps of the files earlier stages replaced "
                "(their files stay; those stages can no longer be undone)");
  cmd->footer(
      "Runs the stage phase of `tandemctl bind` on its own: preflight on every node, then each node's\n"
      "agent pulls the paths the manifest's `stage` section names from the head's agent over mutual TLS\n"
      "(stage.from: controller: tandemctl pushes them from this machine, under --stage-root, to every\n"
      "node, the head too, in the chunks each agent asks for).\n"
      "Whole files only: each lands beside its target as .NAME.tandem-partial, chunk by chunk, is\n"
      "fsynced, its SHA-256 must equal the head's, and only then is it renamed into place. Files\n"
      "already equal (size and SHA-256) are skipped; a file that changes on the head mid-transfer is\n"
      "refused. Replaced files are kept under the agent's state dir, so `tandemctl rollback` (and the\n"
      "dead-man) put them back byte for byte. A cut transfer resumes from its last recorded chunk when\n"
      "stage or bind runs again. The backups are kept until a later bind succeeds (its disarm frees those of\n"
      "earlier binds' stages) or --release-backups frees them all (those of `tandemctl stage` runs too);\n"
      "stage.backup_budget bounds them, checked at preflight.\n"
      "Exit 0 when every node is equal to the source; 1 a manifest without a stage section; 3 a failure.");
  cmd->callback([o] { std::exit(stage(*o)); });
}

}  // namespace tandem::cli
