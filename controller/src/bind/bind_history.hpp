// Past binds and rollbacks, read back from the state dir's journals (<state dir>/<bind name>/
// journal.jsonl) for `tandemctl history` and `tandemctl report`. Read-only: unlike
// BindJournal::open it never creates a directory nor cuts off a torn last line (a bind may be
// writing it right now); a line that does not parse is skipped and counted.
#pragma once
#include <string>
#include <vector>

#include "bind_journal.hpp"

namespace tandem::ctl {

struct HistoryEntry {
  std::string bind_name;  // the directory under the state dir (the manifest's metadata.name)
  std::string bind_id;
  std::string kind;       // bind | rollback
  std::string result;     // bound | rolled_back | rollback_failed | failed_unchanged | aborted | unfinished
  std::string manifest_file;
  long long started_ms = 0, ended_ms = 0;  // ended_ms 0: unfinished
  json failed_step = nullptr;              // {index, node, action, error} of the first step that failed
  std::string report_html, report_markdown, report_json;  // paths that exist, else empty
  json to_json() const;
};

struct History {
  std::vector<HistoryEntry> entries;  // oldest first
  std::vector<std::string> skipped;   // "<journal>:<line>: not a JSON record", for a warning
};

// Every run in every bind directory under `state_dir`, or only bind `bind_name` when not empty.
// A missing state dir is an empty history; an unreadable one is an error.
Result<History> read_history(const std::string& state_dir, const std::string& bind_name = {});

// Runs of one journal's records (what read_history does per directory), oldest first.
std::vector<HistoryEntry> runs_of(const std::vector<json>& records, const std::string& bind_name, const std::string& reports_dir);

// A bind id as new_bind_id makes them (and nothing that could name a path): [A-Za-z0-9-], 1..64.
bool valid_bind_id(const std::string& id);

}  // namespace tandem::ctl
