#include <doctest/doctest.h>

#include "cli_conventions.hpp"
#include "suggest.hpp"

using namespace tandem::cli;

TEST_CASE("edit distance and the nearest verb") {
  CHECK(edit_distance("plann", "plan") == 1);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("same", "same") == 0);
  const std::vector<std::string> verbs{"validate", "plan", "bind", "status", "rollback", "logs"};
  CHECK(closest("plann", verbs) == "plan");
  CHECK(closest("stauts", verbs) == "status");
  CHECK(closest("rolback", verbs) == "rollback");
  CHECK(!closest("x", verbs));          // one letter is no typo of anything
  CHECK(!closest("deploy", verbs));     // too far from every verb
}

namespace {
int run(const std::vector<const char*>& args, CLI::App& app, std::optional<std::string>& unknown) {
  unknown = unknown_command(app, static_cast<int>(args.size()), args.data());
  return unknown ? 1 : 0;
}
}  // namespace

TEST_CASE("unknown commands are found at any depth, options and their values skipped") {
  CLI::App app{"test", "tandemctl"};
  app.add_option("--log-level");
  app.add_subcommand("plan", "");
  auto* pki = app.add_subcommand("pki", "");
  pki->add_subcommand("init", "");
  pki->add_subcommand("show", "");
  std::optional<std::string> u;
  CHECK(run({"tandemctl", "plann"}, app, u) == 1);
  CHECK(*u == "unknown command 'plann'; did you mean 'plan'?");
  CHECK(run({"tandemctl", "--log-level", "debug", "pki", "innit"}, app, u) == 1);
  CHECK(*u == "unknown command 'innit' for 'tandemctl pki'; did you mean 'init'?");
  CHECK(run({"tandemctl", "zzzzzz"}, app, u) == 1);
  CHECK(*u == "unknown command 'zzzzzz'; run 'tandemctl --help' for the commands");
  CHECK(run({"tandemctl", "plan", "manifest.yaml"}, app, u) == 0);  // a verb's own argument
  CHECK(run({"tandemctl", "--log-level", "debug"}, app, u) == 0);
}
