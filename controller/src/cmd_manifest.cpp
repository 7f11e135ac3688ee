// validate, plan, default-manifest: the verbs that read a manifest and change nothing.
#include <iostream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "embedded_manifest.hpp"
#include "plan.hpp"

namespace tandem::cli {

void add_manifest_commands(CLI::App& app) {
  auto validate_opts = std::make_shared<ManifestArg>();
  auto* validate = app.add_subcommand("validate", "Check a manifest and report every error at once (exit 1 if any)");
  add_manifest_arg(validate, *validate_opts);
  validate->callback([validate_opts] {
    auto r = load(*validate_opts);
    if (!r.manifest) std::exit(report_errors(r, validate_opts->output));
    const auto& m = *r.manifest;
    if (validate_opts->output == "json") {
      std::cout << nlohmann::ordered_json{{"valid", true}, {"name", m.name}, {"nodes", m.nodes.size()}}.dump(2) << "\n";
    } else {
      std::cout << display_name(*validate_opts) << ": valid (bind '" << m.name << "', " << m.nodes.size()
                << " nodes, head " << m.head().name << ")\n";
    }
  });

  auto plan_opts = std::make_shared<ManifestArg>();
  auto* plan = app.add_subcommand("plan", "Show the exact ordered steps `bind` will run on each node (workers first)");
  add_manifest_arg(plan, *plan_opts);
  plan->footer(
      "Steps are numbered in the order bind runs them. Each shows the node, a stable action id,\n"
      "what it checks, the exact command it runs (argv, never a shell) and how rollback undoes it.");
  plan->callback([plan_opts] {
    auto r = load(*plan_opts);
    if (!r.manifest) std::exit(report_errors(r, plan_opts->output));
    auto p = make_plan(*r.manifest);
    if (plan_opts->output == "json") std::cout << plan_to_json(p).dump(2) << "\n";
    else std::cout << render_plan_text(p);
  });

  auto* def = app.add_subcommand("default-manifest", "Print the embedded default manifest (manifests/local.yaml)");
  def->callback([] { std::cout << embedded_local_manifest(); });
}

}  // namespace tandem::cli
