// The controller's own journal of a bind: JSON lines, each written and fsynced before the
// controller acts on it, in <state dir>/<bind name>/journal.jsonl. A controller killed at any
// point resumes from here: steps recorded done are not redone, a step recorded begun is sent
// again with the same op id (the agent replays it), and an unfinished rollback is finished.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::ctl {

using nlohmann::json;

// <state dir>/<bind name>, the directory of one bind's journal and reports. The name must be a
// DNS label (tandem/names.hpp): validation already demands it, and this refuses anything else
// again so that no manifest, however it got here, can put a journal outside the state directory.
Result<std::string> bind_dir(const std::string& state_dir, const std::string& bind_name);

class BindJournal {
 public:
  // Creates the directory if needed and reads what is there. A torn last line (a kill during a
  // write) is ignored; anything else unreadable is an error.
  static Result<BindJournal> open(const std::string& dir);

  // Adds "t" (unix ms) to `record`, appends it as one line and fsyncs before returning.
  Status append(json record);
  const std::vector<json>& records() const { return records_; }
  const std::string& dir() const { return dir_; }
  std::string path() const { return dir_ + "/journal.jsonl"; }

 private:
  explicit BindJournal(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::vector<json> records_;
};

// One bind run (one bind id) as the journal tells it.
struct StepRecord {
  std::string op_id;
  bool done = false;
  bool failed = false;
  json evidence;           // when done (or the failure's evidence)
  std::string error;       // when failed
  std::string note;        // when done: the one-line result shown on the progress display
  std::string node;        // rollback tasks: where it ran (older journals lack it: empty)
  long long started_ms = 0, ended_ms = 0;
};

struct BindRun {
  std::string bind_id;
  std::string kind = "bind";  // bind | rollback (an operator's rollback after a finished bind)
  std::string manifest_sha256;
  std::string manifest_file;
  long long started_ms = 0;
  std::map<int, StepRecord> steps;              // plan step index -> record
  bool rollback_begun = false;
  std::string rollback_reason;
  std::map<std::string, StepRecord> rollback;   // rollback task key -> record
  std::optional<std::string> result;            // bound | rolled_back | rollback_failed | aborted
  long long ended_ms = 0;
  std::string report;                           // report path, once written
  std::vector<json> events;                     // every record of this run, in order

  bool finished() const { return result.has_value(); }
};

// The last run recorded (the newest bind.begin), if any.
std::optional<BindRun> last_run(const BindJournal& j);
// Folds one record of `run` into it (what last_run does for each; the runner for each append).
void fold(BindRun& run, const json& record);

// A fresh bind id: "b" + UTC time + 4 random hex digits, e.g. b20261202T163500Z-3fa9.
std::string new_bind_id();
long long now_ms();

}  // namespace tandem::ctl
