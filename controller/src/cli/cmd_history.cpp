// tandemctl history / report: past binds and rollbacks from the state dir's journals, and where a
// bind's report is. Read-only: neither takes the state lock, so both work while a bind runs.
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "bind/bind_history.hpp"
#include "cli_conventions.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "controller_session.hpp"
#include "bind/deadman_summary.hpp"
#include "tandem/names.hpp"

extern char** environ;

namespace tandem::cli {
namespace {

using ctl::json;

struct HistoryOpts {
  std::string manifest;  // empty: every bind name in the state dir
  std::string output = "text";
  ctl::ControllerDirs dirs;
};

struct ReportOpts {
  std::string bind_id;
  bool open = false;
  std::string output = "text";
  ctl::ControllerDirs dirs;
};

std::string duration(long long ms) {
  if (ms <= 0) return "-";
  char b[32];
  if (ms < 120000) std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(ms) / 1000.0);
  else std::snprintf(b, sizeof b, "%lld m %02lld s", ms / 60000, (ms / 1000) % 60);
  return b;
}

int history(const HistoryOpts& o) {
  std::string name;
  if (!o.manifest.empty()) {
    auto r = load_manifest_file(o.manifest);
    if (!r.manifest) return report_errors(r, o.output);
    name = r.manifest->name;
  }
  auto h = ctl::read_history(o.dirs.state_dir, name);
  if (!h) {
    std::cerr << "tandemctl history: " << h.error().message << "\n";
    return kExitInvalid;
  }
  for (const auto& s : h->skipped) std::cerr << "tandemctl history: warning: " << s << " (skipped)\n";
  if (o.output == "json") {
    json list = json::array();
    for (const auto& e : h->entries) list.push_back(e.to_json());
    std::cout << json{{"state_dir", o.dirs.state_dir}, {"runs", list}}.dump(2) << "\n";
    return 0;
  }
  if (h->entries.empty()) {
    std::cout << "No bind has run" << (name.empty() ? "" : " for '" + name + "'") << " with state dir " << o.dirs.state_dir << ".\n";
    return 0;
  }
  std::printf("%-24s %-14s %-8s %-16s %-20s %-10s %s\n", "BIND ID", "NAME", "KIND", "RESULT", "STARTED", "DURATION", "FAILED STEP");
  for (const auto& e : h->entries) {
    std::string failed = "-";
    if (e.failed_step.is_object())
      failed = std::to_string(e.failed_step.value("index", 0)) + " " + e.failed_step.value("action", "") + " on " +
               e.failed_step.value("node", "");
    std::printf("%-24s %-14s %-8s %-16s %-20s %-10s %s\n", e.bind_id.c_str(), e.bind_name.c_str(), e.kind.c_str(), e.result.c_str(),
                e.started_ms ? ctl::utc_timestamp(e.started_ms).c_str() : "-",
                duration(e.ended_ms ? e.ended_ms - e.started_ms : 0).c_str(), failed.c_str());
    const std::string& report = !e.report_html.empty() ? e.report_html : e.report_markdown;
    if (!report.empty()) std::printf("    report: %s\n", report.c_str());
  }
  return 0;
}

// A desktop's browser, through xdg-open, only where there is a display to show it on. Returns
// why not, or "" when it was handed over.
std::string open_in_browser(const std::string& path) {
  const char* display = std::getenv("DISPLAY");
  const char* wayland = std::getenv("WAYLAND_DISPLAY");
  if ((!display || !*display) && (!wayland || !*wayland)) return "no display here (DISPLAY and WAYLAND_DISPLAY are unset)";
  std::string prog = "xdg-open", arg = path;
  char* argv[] = {prog.data(), arg.data(), nullptr};
  pid_t pid = 0;
  if (int rc = posix_spawnp(&pid, "xdg-open", nullptr, nullptr, argv, environ); rc != 0)
    return std::string("xdg-open could not be started: ") + std::strerror(rc);
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return "xdg-open failed";
  return "";
}

int report(const ReportOpts& o) {
  if (!ctl::valid_bind_id(o.bind_id)) {
    std::cerr << "tandemctl report: '" << printable(o.bind_id)
              << "' is not a bind id (expected letters, digits and '-', like b20261202T163500Z-3fa9; see `tandemctl history`)\n";
    return kExitUsage;
  }
  auto h = ctl::read_history(o.dirs.state_dir);
  if (!h) {
    std::cerr << "tandemctl report: " << h.error().message << "\n";
    return kExitInvalid;
  }
  const ctl::HistoryEntry* found = nullptr;
  for (const auto& e : h->entries)
    if (e.bind_id == o.bind_id) found = &e;
  if (!found) {
    std::cerr << "tandemctl report: no bind " << o.bind_id << " in " << o.dirs.state_dir << " (`tandemctl history` lists them)\n";
    return kExitInvalid;
  }
  const std::string& path = !found->report_html.empty() ? found->report_html : found->report_markdown;
  if (o.output == "json") {
    std::cout << found->to_json().dump(2) << "\n";
  } else if (path.empty()) {
    std::cerr << "tandemctl report: bind " << o.bind_id << " (" << found->result << ") has no report yet\n";
    return kExitFailed;
  } else {
    std::cout << path << "\n";
  }
  if (o.open && !path.empty())
    if (std::string why = open_in_browser(path); !why.empty())
      std::cerr << "tandemctl report: not opened: " << why << "; the path is above\n";
  return path.empty() ? kExitFailed : 0;
}

}  // namespace

void add_history_commands(CLI::App& app) {
  auto h = std::make_shared<HistoryOpts>();
  auto* hist = app.add_subcommand("history", "List past binds and rollbacks of this state dir: result, duration, failed step, report");
  hist->add_option("manifest", h->manifest, "Only the binds of this manifest's name (default: every bind name in the state dir)");
  add_output_option(hist, h->output);
  ctl::add_controller_options(hist, h->dirs);
  hist->footer(
      "Reads STATE_DIR/<bind name>/journal.jsonl, oldest run first. RESULT is bound, rolled_back,\n"
      "rollback_failed, failed_unchanged (failed in preflight, nothing changed), aborted (the operator\n"
      "said no at the prompt) or unfinished (running now, or killed: `tandemctl bind` resumes it).\n"
      "-o json gives every field, with times in unix milliseconds. Takes no lock: safe while a bind runs.");
  hist->callback([h] { std::exit(history(*h)); });

  auto r = std::make_shared<ReportOpts>();
  auto* rep = app.add_subcommand("report", "Print the path of a bind's report (HTML, else Markdown); --open shows it");
  rep->add_option("bind_id", r->bind_id, "A bind id from `tandemctl history` (b<UTC time>-<hex>)")->required();
  rep->add_flag("--open", r->open, "Also open the report in a browser, where there is a display (xdg-open)");
  add_output_option(rep, r->output);
  ctl::add_controller_options(rep, r->dirs);
  rep->footer(
      "The HTML report is self-contained (inline CSS and SVG, no script, nothing fetched): copy it anywhere.\n"
      "Exit 0 with the path; 1 when no such bind is recorded; 2 for a malformed id; 3 when it has no report yet.");
  rep->callback([r] { std::exit(report(*r)); });
}

}  // namespace tandem::cli
