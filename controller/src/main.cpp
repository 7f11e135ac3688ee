// tandemctl: the operator's CLI. Verbs are the operator's verbs; `plan` shows exactly what
// `bind` will do.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "embedded_manifest.hpp"
#include "plan.hpp"
#include "tandem/manifest.hpp"
#include "tandem/version.hpp"

namespace {

constexpr int kExitInvalid = 1;

struct Common {
  std::string manifest;
  std::string output = "text";
};

tandem::LoadResult load(const Common& c) {
  if (c.manifest.empty()) return tandem::load_manifest_text(tandem::embedded_local_manifest(), "<embedded local.yaml>");
  return tandem::load_manifest_file(c.manifest);
}

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("manifest", c.manifest,
                  "Bind manifest (YAML, apiVersion tandem/v1). Omitted: the embedded default, a two-rank "
                  "bind on this machine (see `tandemctl default-manifest`).")
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", c.output, "Output format: text for people, json for scripts")
      ->check(CLI::IsMember({"text", "json"}));
}

int report_errors(const tandem::LoadResult& r, const Common& c) {
  if (c.output == "json") {
    auto arr = nlohmann::ordered_json::array();
    for (const auto& d : r.errors)
      arr.push_back({{"file", d.file}, {"line", d.line}, {"column", d.column}, {"message", d.message}});
    std::cout << nlohmann::ordered_json{{"valid", false}, {"errors", arr}}.dump(2) << "\n";
  } else {
    std::cerr << tandem::format_diagnostics(r.errors);
    std::cerr << r.errors.size() << (r.errors.size() == 1 ? " error" : " errors") << "; nothing was changed.\n";
  }
  return kExitInvalid;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tandemctl: bring a two-node tensor-parallel LLM server up, prove it, and fall back safely.\n\n"
      "Start with `tandemctl plan` to see every step a bind would run, node by node.\n"
      "A manifest is validated in full before anything is touched; errors are reported as\n"
      "file:line:col: what is wrong, what was expected."};
  app.set_version_flag("--version", std::string("tandemctl ") + tandem::kVersion);
  app.require_subcommand(1);

  Common validate_opts;
  auto* validate = app.add_subcommand("validate", "Check a manifest and report every error at once (exit 1 if any)");
  add_common(validate, validate_opts);
  validate->callback([&] {
    auto r = load(validate_opts);
    if (!r.manifest) std::exit(report_errors(r, validate_opts));
    const auto& m = *r.manifest;
    if (validate_opts.output == "json") {
      std::cout << nlohmann::ordered_json{{"valid", true}, {"name", m.name}, {"nodes", m.nodes.size()}}.dump(2) << "\n";
    } else {
      std::cout << (validate_opts.manifest.empty() ? "<embedded local.yaml>" : validate_opts.manifest)
                << ": valid (bind '" << m.name << "', " << m.nodes.size() << " nodes, head " << m.head().name
                << ")\n";
    }
  });

  Common plan_opts;
  auto* plan = app.add_subcommand("plan", "Show the exact ordered steps `bind` will run on each node (workers first)");
  add_common(plan, plan_opts);
  plan->footer(
      "Steps are numbered in the order bind runs them. Each shows the node, a stable action id,\n"
      "what it checks, the exact command it runs (argv, never a shell) and how rollback undoes it.");
  plan->callback([&] {
    auto r = load(plan_opts);
    if (!r.manifest) std::exit(report_errors(r, plan_opts));
    auto p = tandem::make_plan(*r.manifest);
    if (plan_opts.output == "json") std::cout << tandem::plan_to_json(p).dump(2) << "\n";
    else std::cout << tandem::render_plan_text(p);
  });

  auto* def = app.add_subcommand("default-manifest", "Print the embedded default manifest (manifests/local.yaml)");
  def->callback([] { std::cout << tandem::embedded_local_manifest(); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
