#include "cli_conventions.hpp"

#include <iostream>

#include "suggest.hpp"
#include "tandem/build_info.hpp"

namespace tandem::cli {

namespace {

// Top-level options whose value is the next argument (so it is not mistaken for a verb).
bool takes_value(std::string_view arg) { return arg == "--log-level" || arg == "--log-format" || arg == "-o" || arg == "--output"; }

std::vector<std::string> verb_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
    for (const auto& alias : sub->get_aliases()) names.push_back(alias);
  }
  return names;
}

const CLI::App* find_verb(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->check_name(name)) return sub;
  return nullptr;
}

}  // namespace

void add_version_flag(CLI::App& app) {
  // A plain flag so --help lists it; handle_version has answered before CLI11 ever sees it.
  app.add_flag("--version")->description("Print version, commit and build type, and exit (with -o json: as JSON)");
}

std::optional<int> handle_version(int argc, const char* const* argv, std::string_view program, bool cuda) {
  bool version = false, json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--version") version = true;
    if (a == "--json" || a == "--output=json" || a == "-ojson" || a == "-o=json") json = true;
    if ((a == "-o" || a == "--output") && i + 1 < argc && std::string_view(argv[i + 1]) == "json") json = true;
  }
  if (!version) return std::nullopt;
  std::cout << (json ? version_json(program, cuda).dump(2) : version_text(program, cuda)) << "\n";
  return 0;
}

std::optional<std::string> unknown_command(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* at = &app;
  std::string path = app.get_name();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!a.empty() && a.front() == '-') {
      if (takes_value(a)) ++i;
      continue;
    }
    const auto names = verb_names(*at);
    if (names.empty()) return std::nullopt;  // a verb's own arguments from here on
    if (const CLI::App* sub = find_verb(*at, a)) {
      at = sub;
      path += " " + a;
      continue;
    }
    std::string msg = "unknown command '" + a + "'";
    if (at != &app) msg += " for '" + path + "'";
    if (auto near = closest(a, names)) msg += "; did you mean '" + *near + "'?";
    else msg += "; run '" + path + " --help' for the commands";
    return msg;
  }
  return std::nullopt;
}

int usage_exit(CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    // --help (or --help-all): CLI11 prints it to stdout, and the status is 0.
    return app.exit(e);
  }
  if (auto unknown = unknown_command(app, argc, argv)) {
    std::cerr << app.get_name() << ": " << *unknown << "\n";
    return kExitUsage;
  }
  std::cerr << app.get_name() << ": " << e.what() << "\nRun '" << app.get_name() << " --help' for usage.\n";
  return kExitUsage;
}

}  // namespace tandem::cli
