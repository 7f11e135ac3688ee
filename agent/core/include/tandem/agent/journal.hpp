// The agent's journal: append-only JSON lines in the state dir, each record fsynced BEFORE the
// mutation it describes, so after a crash (kill -9 at any point) the agent knows what it may have
// done and can undo it exactly. Big undo data (original file bytes) lives in blob files beside
// the journal, written and fsynced before the edit; the journal records their SHA-256.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/agent/error.hpp"

namespace tandem::agent {

// released: a verified stage op kept for good, its backups freed (a later bind, or the operator);
// there is nothing left to undo, so undo_incomplete passes it by.
enum class Phase { intent, applied, verified, undone, failed, released };
const char* to_string(Phase p);
std::optional<Phase> phase_from_string(std::string_view s);

struct Record {
  std::uint64_t seq = 0;
  std::string time;  // UTC, ISO 8601 with milliseconds
  std::string op_id;
  std::string step;
  Phase phase = Phase::intent;
  nlohmann::json data;
  nlohmann::json to_json() const;
};

// A blob beside the journal: its file name (relative to the state dir), SHA-256 and size.
struct BlobRef {
  std::string file;
  std::string sha256;
  std::uint64_t size = 0;
  nlohmann::json to_json() const;
  static Result<BlobRef> from_json(const nlohmann::json& j);
};

// Op ids name requests (idempotency keys) and end up in file names and cron markers.
bool valid_op_id(std::string_view id);  // [A-Za-z0-9._-], 1..64 chars, not starting with '.'

class Journal {
 public:
  static constexpr const char* kFileName = "journal.jsonl";

  // Opens (creating when missing) <state_dir>/journal.jsonl and replays it. A torn last line
  // (crash mid-append) is dropped with a warning and cut off the file; a bad line before the
  // end is corruption and an error.
  static Result<std::unique_ptr<Journal>> open(const std::string& state_dir);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Write + fsync one record; returns it as stored.
  Result<Record> append(const std::string& op_id, const std::string& step, Phase phase, nlohmann::json data);

  const std::vector<Record>& records() const { return records_; }
  std::vector<Record> records_for(const std::string& op_id) const;
  // The latest record of an op in a phase, if any.
  std::optional<Record> last(const std::string& op_id, Phase phase) const;
  // Ops with an intent (applied or maybe half-applied) and no "undone", oldest first.
  std::vector<std::string> ops_to_undo() const;
  const std::vector<std::string>& warnings() const { return warnings_; }

  Result<BlobRef> save_blob(const std::string& op_id, std::string_view bytes);
  // The blob's bytes, refused when they no longer match the recorded SHA-256.
  Result<std::string> load_blob(const BlobRef& ref) const;

  const std::string& dir() const { return dir_; }
  std::string path() const { return dir_ + "/" + kFileName; }

 private:
  Journal(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  Status replay(const std::string& text);

  std::string dir_;
  int fd_ = -1;
  std::vector<Record> records_;
  std::vector<std::string> warnings_;
  std::uint64_t blob_counter_ = 0;
};

}  // namespace tandem::agent
