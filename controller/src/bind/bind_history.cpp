#include "bind_history.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

namespace tandem::ctl {
namespace fs = std::filesystem;

namespace {

std::string existing(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : std::string();
}

// The first step that failed and was not done later by a resumed attempt, from the run's events
// (step.begin names the node and action; step.failed the error).
json failed_step_of(const BindRun& run) {
  std::map<int, json> begun;
  for (const auto& ev : run.events)
    if (ev.value("event", "") == "step.begin") begun[ev.value("index", 0)] = ev;
  for (const auto& [index, rec] : run.steps) {
    if (!rec.failed) continue;
    const json b = begun.count(index) ? begun[index] : json::object();
    return {{"index", index}, {"node", b.value("node", "")}, {"action", b.value("action", "")}, {"error", rec.error}};
  }
  return nullptr;
}

}  // namespace

bool valid_bind_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  });
}

json HistoryEntry::to_json() const {
  return {{"bind", bind_name},
          {"bind_id", bind_id},
          {"kind", kind},
          {"result", result},
          {"manifest", manifest_file},
          {"started_ms", started_ms},
          {"ended_ms", ended_ms},
          {"duration_ms", ended_ms && started_ms ? ended_ms - started_ms : 0},
          {"failed_step", failed_step},
          {"report", {{"html", report_html}, {"markdown", report_markdown}, {"json", report_json}}}};
}

std::vector<HistoryEntry> runs_of(const std::vector<json>& records, const std::string& bind_name, const std::string& reports_dir) {
  std::vector<BindRun> runs;
  std::map<std::string, size_t> by_id;
  for (const auto& r : records) {
    const std::string id = r.value("bind_id", "");
    if (id.empty()) continue;
    if (r.value("event", "") == "bind.begin" && !by_id.count(id)) {
      by_id[id] = runs.size();
      runs.emplace_back();
    }
    auto it = by_id.find(id);
    if (it != by_id.end()) fold(runs[it->second], r);
  }
  std::vector<HistoryEntry> out;
  for (const auto& run : runs) {
    HistoryEntry e;
    e.bind_name = bind_name;
    e.bind_id = run.bind_id;
    e.kind = run.kind;
    e.result = run.result.value_or("unfinished");
    e.manifest_file = run.manifest_file;
    e.started_ms = run.started_ms;
    e.ended_ms = run.ended_ms;
    e.failed_step = failed_step_of(run);
    if (valid_bind_id(run.bind_id)) {
      const fs::path base = fs::path(reports_dir) / run.bind_id;
      e.report_html = existing(base.string() + ".html");
      e.report_markdown = existing(base.string() + ".md");
      e.report_json = existing(base.string() + ".json");
    }
    out.push_back(std::move(e));
  }
  return out;
}

Result<History> read_history(const std::string& state_dir, const std::string& bind_name) {
  History h;
  std::error_code ec;
  if (!fs::exists(state_dir, ec)) return h;
  std::vector<fs::path> dirs;
  for (fs::directory_iterator it(state_dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory() && fs::is_regular_file(it->path() / "journal.jsonl") &&
        (bind_name.empty() || it->path().filename() == bind_name))
      dirs.push_back(it->path());
  if (ec) return Error{state_dir + ": " + ec.message()};
  for (const auto& dir : dirs) {
    const fs::path journal = dir / "journal.jsonl";
    std::ifstream in(journal);
    if (!in) return Error{journal.string() + ": cannot read"};
    std::vector<json> records;
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      json r = json::parse(line, nullptr, false);
      if (r.is_discarded() || !r.is_object()) {
        h.skipped.push_back(journal.string() + ":" + std::to_string(lineno) + ": not a JSON record");
        continue;
      }
      records.push_back(std::move(r));
    }
    auto runs = runs_of(records, dir.filename().string(), (dir / "reports").string());
    h.entries.insert(h.entries.end(), runs.begin(), runs.end());
  }
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const HistoryEntry& a, const HistoryEntry& b) { return a.started_ms < b.started_ms; });
  return h;
}

}  // namespace tandem::ctl
