// validate, plan, default-manifest: the verbs that read a manifest and change nothing.
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"
#include "plan/embedded_manifest.hpp"
#include "plan/plan.hpp"
#include "plan/saved_plan.hpp"

namespace tandem::cli {
namespace {

struct PlanOpts {
  ManifestArg manifest;
  std::string out;  // --out: save the plan here
};

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int save_plan(const PlanOpts& o, const LoadResult& r, const Plan& p) {
  if (o.manifest.path.empty()) {
    std::cerr << "tandemctl plan: --out needs a manifest file (the embedded default has no path to check again at bind time)\n";
    return kExitInvalid;
  }
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(o.manifest.path, ec).lexically_normal().string();
  if (ec) {
    std::cerr << "tandemctl plan: " << o.manifest.path << ": " << ec.message() << "\n";
    return kExitInvalid;
  }
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << saved_plan_json(*r.manifest, abs, ctl::sha256_hex(r.text), p, utc_now()).dump(2) << "\n";
    if (!f) {
      std::cerr << "tandemctl plan: " << tmp << ": cannot write\n";
      return kExitInvalid;
    }
  }
  std::filesystem::rename(tmp, o.out, ec);
  if (ec) {
    std::cerr << "tandemctl plan: " << o.out << ": " << ec.message() << "\n";
    return kExitInvalid;
  }
  return 0;
}

int run_plan(const PlanOpts& o) {
  auto r = load(o.manifest);
  if (!r.manifest) return report_errors(r, o.manifest.output);
  auto p = make_plan(*r.manifest);
  if (!o.out.empty())
    if (int rc = save_plan(o, r, p); rc != 0) return rc;
  if (o.manifest.output == "json") std::cout << plan_to_json(p).dump(2) << "\n";
  else std::cout << render_plan_text(p);
  if (!o.out.empty() && o.manifest.output != "json")
    std::cout << "\nSaved to " << o.out << "; run exactly this plan with `tandemctl bind " << o.out << "`.\n";
  return 0;
}

}  // namespace

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

  auto plan_opts = std::make_shared<PlanOpts>();
  auto* plan = app.add_subcommand("plan", "Show the exact ordered steps `bind` will run on each node (workers first)");
  add_manifest_arg(plan, plan_opts->manifest);
  plan->add_option("--out", plan_opts->out,
                   "Also save the plan to this file (JSON) for `tandemctl bind FILE`, which refuses it once the manifest, "
                   "its nodes or its pins change");
  plan->footer(
      "Steps are numbered in the order bind runs them. Each shows the node, a stable action id,\n"
      "what it checks, the exact command it runs (argv, never a shell) and how rollback undoes it.\n\n"
      "With --out, the file records the manifest's absolute path and SHA-256, every node's identity\n"
      "(name, addresses, role, agent port, root), the pinned digests and the steps; `tandemctl bind\n"
      "FILE` re-reads that manifest and refuses to run when any of them changed, naming each change.");
  plan->callback([plan_opts] { std::exit(run_plan(*plan_opts)); });

  auto* def = app.add_subcommand("default-manifest", "Print the embedded default manifest (manifests/local.yaml)");
  def->callback([] { std::cout << embedded_local_manifest(); });
}

}  // namespace tandem::cli
