#include "tandem/agent/cron_step.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include "tandem/agent/command.hpp"
#include "tandem/agent/cron_scan.hpp"
#include "tandem/agent/fs.hpp"
#include "tandem/agent/sha256.hpp"
#include "tandem/agent/systemd_timers.hpp"

namespace tandem::agent {
namespace {

json matches_json(const std::vector<CronMatch>& ms) {
  json a = json::array();
  for (const auto& m : ms) a.push_back({{"line", m.line}, {"text", m.text}, {"pattern", m.pattern}});
  return a;
}

// The intent is read back from the journal, which a crash can cut short or a person can edit: it
// is checked field by field here, so apply/verify/undo answer with an Error naming the field
// instead of letting json::at() throw out of a value-returning step.
Error bad_intent(const std::string& what) { return plain_error("", "cron intent from the journal: " + what); }

bool is_text(const json& j, const char* key) { return j.is_object() && j.contains(key) && j[key].is_string(); }
bool is_count(const json& j, const char* key) { return j.is_object() && j.contains(key) && j[key].is_number_unsigned(); }

Result<std::vector<CronMatch>> matches_from(const json& a) {
  if (!a.is_array()) return bad_intent("\"lines\" is not a list");
  std::vector<CronMatch> out;
  for (const auto& m : a) {
    if (!is_count(m, "line") || !is_text(m, "text") || !is_text(m, "pattern"))
      return bad_intent("a line is not {line, text, pattern}: " + m.dump());
    out.push_back({m["line"].get<std::size_t>(), m["text"].get<std::string>(), m["pattern"].get<std::string>()});
  }
  return out;
}

// One file as plan() recorded it.
struct PlannedFile {
  std::string path, sha256_before, sha256_after;
  FileOwner owner;
  std::vector<CronMatch> lines;
  json lines_json, backup;
};

Result<std::vector<PlannedFile>> planned_files(const json& intent) {
  if (!intent.is_object() || !intent.contains("files") || !intent["files"].is_array())
    return bad_intent("\"files\" is missing or not a list");
  std::vector<PlannedFile> out;
  for (const auto& f : intent["files"]) {
    if (!is_text(f, "path") || !is_text(f, "sha256_before") || !is_text(f, "sha256_after") || !is_count(f, "mode") ||
        !is_count(f, "uid") || !is_count(f, "gid") || !f.contains("lines"))
      return bad_intent("a file is not {path, sha256_before, sha256_after, mode, uid, gid, lines}: " + f.dump());
    auto lines = matches_from(f["lines"]);
    if (!lines) return lines.error().with_context(f["path"].get<std::string>());
    out.push_back({f["path"].get<std::string>(), f["sha256_before"].get<std::string>(), f["sha256_after"].get<std::string>(),
                   FileOwner{f["mode"].get<mode_t>(), f["uid"].get<uid_t>(), f["gid"].get<gid_t>()}, std::move(*lines),
                   f["lines"], f.value("backup", json())});
  }
  return out;
}

// The timer units plan() decided to stop (strings only).
Result<std::vector<std::string>> units_to_stop(const json& intent) {
  if (!intent.is_object() || !intent.contains("timers") || !intent["timers"].is_object())
    return bad_intent("\"timers\" is missing or not an object");
  std::vector<std::string> out;
  for (const auto& u : intent["timers"].value("to_stop", json::array())) {
    if (!u.is_string()) return bad_intent("a timer to stop is not a unit name: " + u.dump());
    out.push_back(u.get<std::string>());
  }
  return out;
}

json errors_json(const std::vector<Error>& es) {
  json a = json::array();
  for (const auto& e : es) a.push_back(to_json(e));
  return a;
}

// Every active matching line on the node, by file (used by check and verify).
json scan_active(const NodeRoot& root, const std::vector<std::string>& patterns, std::size_t& count) {
  std::vector<Error> refused;
  json files = json::array();
  count = 0;
  for (const auto& host : list_cron_files(root, refused)) {
    auto real = root.resolve(host);
    auto text = real ? read_file(*real) : Result<std::string>(real.error());
    if (!text) {
      refused.push_back(text.error());
      continue;
    }
    auto ms = find_cron_matches(*text, patterns);
    count += ms.size();
    if (!ms.empty()) files.push_back({{"path", host}, {"lines", matches_json(ms)}});
  }
  return {{"files", files}, {"refused", errors_json(refused)}};
}

Result<std::string> run_systemctl(const std::string& verb, const std::string& unit, int& exit_code) {
  auto sc = find_executable("systemctl");
  if (!sc) return plain_error("systemctl", "not found");
  auto r = run_command({*sc, verb, unit}, std::chrono::seconds(30));
  if (!r) return r.error();
  exit_code = r->exit_code;
  return r->output_tail;
}

}  // namespace

json CronStep::scan_timers(const NodeRoot& root) const {
  json found = json::array();
  if (!include_timers_) return {{"found", found}, {"not_stopped_reason", "systemd timers excluded by the manifest"}};
  for (const auto& t : find_matching_timers(root, patterns_)) found.push_back(t.to_json());
  return {{"found", found}, {"not_stopped_reason", why_timers_cannot_be_stopped(root)}};
}

Result<json> CronStep::check(const StepContext& ctx) {
  std::size_t n = 0;
  json ev = scan_active(ctx.root, patterns_, n);
  ev["active_matches"] = n;
  ev["patterns"] = patterns_;
  ev["timers"] = scan_timers(ctx.root);
  return ev;
}

Result<json> CronStep::plan(const StepContext& ctx) {
  std::vector<Error> refused;
  json files = json::array();
  for (const auto& host : list_cron_files(ctx.root, refused)) {
    auto real = ctx.root.resolve(host);
    if (!real) return real.error();
    auto text = read_file(*real);
    if (!text) return text.error();
    auto ms = find_cron_matches(*text, patterns_);
    if (ms.empty()) continue;
    auto owner = file_owner(*real);
    if (!owner) return owner.error();
    // The original bytes are on disk (and fsynced) before the intent record that names them.
    auto backup = ctx.journal.save_blob(ctx.op_id, *text);
    if (!backup) return backup.error();
    files.push_back({{"path", host}, {"lines", matches_json(ms)}, {"backup", backup->to_json()},
                     {"sha256_before", backup->sha256}, {"sha256_after", sha256_hex(disable_cron_lines(*text, ms, ctx.op_id))},
                     {"mode", owner->mode}, {"uid", owner->uid}, {"gid", owner->gid}});
  }
  json timers = scan_timers(ctx.root);
  json to_stop = json::array();
  if (timers["not_stopped_reason"].get<std::string>().empty()) {
    for (const auto& t : timers["found"]) {
      int rc = 1;
      auto out = run_systemctl("is-active", t["unit"].get<std::string>(), rc);
      if (out && rc == 0) to_stop.push_back(t["unit"]);
    }
  }
  timers["to_stop"] = to_stop;
  return json{{"patterns", patterns_}, {"files", files}, {"timers", timers}, {"refused", errors_json(refused)}};
}

Result<json> CronStep::apply(const StepContext& ctx, const json& intent) {
  auto planned = planned_files(intent);
  if (!planned) return planned.error();
  auto units = units_to_stop(intent);
  if (!units) return units.error();
  json files = json::array();
  std::size_t lines = 0;
  for (const auto& f : *planned) {
    auto real = ctx.root.resolve(f.path);
    if (!real) return real.error();
    auto text = read_file(*real);
    if (!text) return text.error();
    const auto now = sha256_hex(*text);
    if (now != f.sha256_after) {  // equal: this file was already edited before a crash; resume past it
      if (now != f.sha256_before)
        return plain_error(f.path, "changed between plan and apply (sha256 " + now + "); not editing");
      auto edited = disable_cron_lines(*text, f.lines, ctx.op_id);
      auto w = rewrite_in_place(*real, edited, f.owner);  // inode kept: see fs.hpp
      if (!w) return w.error();
    }
    lines += f.lines.size();
    files.push_back({{"path", f.path}, {"lines", f.lines_json}, {"sha256_before", f.sha256_before},
                     {"sha256_after", f.sha256_after}, {"mode", f.owner.mode}});
  }
  json timers = intent["timers"];
  json stopped = json::array();
  for (const auto& unit : *units) {
    int rc = 1;
    auto out = run_systemctl("stop", unit, rc);
    if (!out) return out.error();
    if (rc != 0) return plain_error(unit, "systemctl stop failed: " + *out);
    stopped.push_back(unit);
  }
  timers["stopped"] = stopped;
  timers.erase("to_stop");
  return json{{"files", files}, {"files_changed", files.size()}, {"lines_disabled", lines}, {"timers", timers},
              {"refused", intent.value("refused", json::array())}};
}

Result<json> CronStep::verify(const StepContext& ctx, const json& intent, const json&) {
  std::size_t active = 0;
  json scan = scan_active(ctx.root, patterns_, active);
  auto planned = planned_files(intent);
  if (!planned) return planned.error();
  json files = json::array();
  for (const auto& f : *planned) {
    auto real = ctx.root.resolve(f.path);
    auto text = real ? read_file(*real) : Result<std::string>(real.error());
    bool same = text && sha256_hex(*text) == f.sha256_after;
    files.push_back({{"path", f.path}, {"as_applied", same}});
  }
  json ev{{"active_matches", active}, {"active", scan["files"]}, {"edited_files", files}};
  if (active > 0) {
    Error e = plain_error("", std::to_string(active) + " matching cron line(s) are still active");
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> CronStep::undo(const StepContext& ctx, const json& intent) {
  json restored = json::array(), already = json::array();
  std::vector<Error> errors;
  auto planned = planned_files(intent);
  if (!planned) return planned.error();
  auto units = units_to_stop(intent);
  if (!units) return units.error();
  for (auto it = planned->rbegin(); it != planned->rend(); ++it) {
    const auto& host = it->path;
    const auto& before = it->sha256_before;
    const FileOwner& owner = it->owner;
    auto real = ctx.root.resolve(host);
    if (!real) {
      errors.push_back(real.error());
      continue;
    }
    auto text = read_file(*real);
    const auto now = text ? sha256_hex(*text) : std::string();
    if (now == before) {  // never edited (crash before the rewrite) or already restored
      if (::chmod(real->c_str(), owner.mode) != 0 || ::chown(real->c_str(), owner.uid, owner.gid) != 0)
        errors.push_back(sys_error(host, "cannot restore mode/owner"));
      already.push_back(host);
      continue;
    }
    auto ref = BlobRef::from_json(it->backup);
    auto bytes = ref ? ctx.journal.load_blob(*ref) : Result<std::string>(ref.error());
    if (!bytes) {
      errors.push_back(bytes.error());
      continue;
    }
    // A restore killed mid-rewrite leaves the original plus blank lines: finish it.
    const bool interrupted = text && is_rewrite_leftover(*text, *bytes);
    if (now != it->sha256_after && !interrupted) {
      errors.push_back(plain_error(host, "changed since this op edited it (sha256 " + (now.empty() ? "<unreadable>" : now) +
                                             "); not overwriting someone else's edit"));
      continue;
    }
    auto w = rewrite_in_place(*real, *bytes, owner);  // inode kept: see fs.hpp
    if (!w) {
      errors.push_back(w.error());
      continue;
    }
    auto check = read_file(*real);
    if (!check || sha256_hex(*check) != before) {
      errors.push_back(plain_error(host, "restored bytes do not hash to the original"));
      continue;
    }
    restored.push_back({{"path", host}, {"sha256", before}});
  }
  json started = json::array();
  for (const auto& unit : *units) {
    int rc = 1;
    auto out = run_systemctl("start", unit, rc);
    if (!out || rc != 0) errors.push_back(plain_error(unit, "systemctl start failed"));
    else started.push_back(unit);
  }
  json ev{{"restored", restored}, {"already_original", already}, {"timers_started", started}};
  if (!errors.empty()) {
    Error e = plain_error("", std::to_string(errors.size()) + " file(s) or timer(s) could not be restored");
    ev["errors"] = errors_json(errors);
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

}  // namespace tandem::agent
