// tandemctl status / logs: read-only views of the cluster through the agents.
#include <iostream>

#include "bind/bind_journal.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"
#include "bind/deadman_summary.hpp"

namespace tandem::cli {
namespace {

using ctl::json;

struct StatusOpts {
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
};

json last_bind_json(const ctl::BindJournal& j) {
  auto run = ctl::last_run(j);
  if (!run) return nullptr;
  int done = 0;
  for (const auto& [i, r] : run->steps) done += r.done;
  return {{"bind_id", run->bind_id}, {"kind", run->kind}, {"result", run->result ? json(*run->result) : json("unfinished")},
          {"steps_done", done}, {"rollback_begun", run->rollback_begun}, {"report", run->report}};
}

int status(const StatusOpts& o) {
  auto session = ctl::open_session(o.manifest, o.dirs, nullptr);
  if (!session) {
    std::cerr << "tandemctl status: " << session.error().message << "\n";
    return kExitFailed;
  }
  ctl::Session& s = *session;
  json nodes = json::array();
  bool all_ok = true;
  for (const auto& n : s.m.nodes) {
    ctl::AgentClient& a = s.agents.at(n.name);
    a.set_attempts(1);  // status reports an unreachable agent at once
    ctl::AgentReply h = a.health(std::chrono::seconds(5));
    json j{{"node", n.name}, {"address", n.address}, {"role", to_string(n.role)}};
    if (!h.ok) {
      all_ok = false;
      j["agent"] = {{"ok", false}, {"error", h.error}};
    } else {
      j["agent"] = {{"ok", true}, {"version", h.body.value("version", "")}};
      j["manifest"] = h.body.value("manifest", json());
      j["engine"] = h.body.value("engine", json());
      j["deadman"] = h.body.value("deadman", json());
    }
    nodes.push_back(j);
  }
  json last = last_bind_json(*s.journal);
  if (o.manifest.output == "json") {
    std::cout << json{{"bind", s.m.name}, {"nodes", nodes}, {"last_bind", last}}.dump(2) << "\n";
    return all_ok ? 0 : kExitFailed;
  }
  std::cout << "bind '" << s.m.name << "'\n";
  for (const auto& j : nodes) {
    std::cout << "  " << j["node"].get<std::string>() << " (" << j["role"].get<std::string>() << ", " << j["address"].get<std::string>() << "): ";
    if (!j["agent"]["ok"].get<bool>()) {
      std::cout << "agent UNREACHABLE: " << j["agent"]["error"].get<std::string>() << "\n";
      continue;
    }
    const json e = j.value("engine", json::object());
    std::cout << "agent " << j["agent"]["version"].get<std::string>() << "; engine " << e.value("phase", "?");
    if (e.value("pid", -1) > 0) std::cout << " (pid " << e.value("pid", -1) << ")";
    const json d = j.value("deadman", json());
    std::cout << ctl::deadman_summary(d) << "\n";
  }
  if (last.is_null()) std::cout << "  last bind: none recorded in " << s.bind_dir << "\n";
  else
    std::cout << "  last " << last["kind"].get<std::string>() << ": " << last["bind_id"].get<std::string>() << ", "
              << last["result"].get<std::string>() << (last["report"].get<std::string>().empty() ? "" : ", report " + last["report"].get<std::string>())
              << "\n";
  return all_ok ? 0 : kExitFailed;
}

struct LogsOpts {
  std::string node;
  std::size_t lines = 100;
  ManifestArg manifest;
  ctl::ControllerDirs dirs;
};

int logs(const LogsOpts& o) {
  auto session = ctl::open_session(o.manifest, o.dirs, nullptr);
  if (!session) {
    std::cerr << "tandemctl logs: " << session.error().message << "\n";
    return kExitFailed;
  }
  auto it = session->agents.find(o.node);
  if (it == session->agents.end()) {
    std::cerr << "tandemctl logs: no node '" << o.node << "' in " << display_name(o.manifest) << "; nodes:";
    for (const auto& n : session->m.nodes) std::cerr << " " << n.name;
    std::cerr << "\n";
    return kExitInvalid;
  }
  ctl::AgentReply r = it->second.engine_log(o.lines);
  if (!r.ok) {
    std::cerr << "tandemctl logs: " << r.error << "\n";
    return kExitFailed;
  }
  if (o.manifest.output == "json") {
    std::cout << json{{"node", o.node}, {"lines", r.body.value("lines", json::array())}}.dump(2) << "\n";
  } else {
    for (const auto& l : r.body.value("lines", json::array())) std::cout << l.get<std::string>() << "\n";
  }
  return 0;
}

}  // namespace

void add_status_commands(CLI::App& app) {
  auto so = std::make_shared<StatusOpts>();
  auto* st = app.add_subcommand("status", "Per node: agent health, engine rank phase, dead-man, and the last bind's result");
  add_manifest_arg(st, so->manifest);
  ctl::add_controller_options(st, so->dirs);
  st->footer("Read-only. Exit 0 when every agent answers, 3 when one does not (the others are still shown).");
  st->callback([so] { std::exit(status(*so)); });

  auto lo = std::make_shared<LogsOpts>();
  auto* lg = app.add_subcommand("logs", "The engine log of one node's rank, through its agent");
  lg->add_option("node", lo->node, "Node name from the manifest")->required();
  add_manifest_arg(lg, lo->manifest);
  lg->add_option("-n,--lines", lo->lines, "How many of the last lines")->capture_default_str()->check(CLI::Range(1, 10000));
  ctl::add_controller_options(lg, lo->dirs);
  lg->callback([lo] { std::exit(logs(*lo)); });
}

}  // namespace tandem::cli
