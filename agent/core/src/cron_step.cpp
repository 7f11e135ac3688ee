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

std::vector<CronMatch> matches_from(const json& a) {
  std::vector<CronMatch> out;
  for (const auto& m : a) out.push_back({m.at("line").get<std::size_t>(), m.at("text").get<std::string>(), m.at("pattern").get<std::string>()});
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
  json files = json::array();
  std::size_t lines = 0;
  for (const auto& f : intent.at("files")) {
    const auto host = f.at("path").get<std::string>();
    auto real = ctx.root.resolve(host);
    if (!real) return real.error();
    auto text = read_file(*real);
    if (!text) return text.error();
    const auto now = sha256_hex(*text);
    const auto after = f.at("sha256_after").get<std::string>();
    if (now != after) {  // equal: this file was already edited before a crash; resume past it
      if (now != f.at("sha256_before").get<std::string>())
        return plain_error(host, "changed between plan and apply (sha256 " + now + "); not editing");
      auto ms = matches_from(f.at("lines"));
      auto edited = disable_cron_lines(*text, ms, ctx.op_id);
      FileOwner owner{f.at("mode").get<mode_t>(), f.at("uid").get<uid_t>(), f.at("gid").get<gid_t>()};
      auto w = rewrite_in_place(*real, edited, owner);  // inode kept: see fs.hpp
      if (!w) return w.error();
    }
    lines += f.at("lines").size();
    files.push_back({{"path", host}, {"lines", f.at("lines")}, {"sha256_before", f.at("sha256_before")},
                     {"sha256_after", after}, {"mode", f.at("mode")}});
  }
  json timers = intent.at("timers");
  json stopped = json::array();
  for (const auto& unit : timers.at("to_stop")) {
    int rc = 1;
    auto out = run_systemctl("stop", unit.get<std::string>(), rc);
    if (!out) return out.error();
    if (rc != 0) return plain_error(unit.get<std::string>(), "systemctl stop failed: " + *out);
    stopped.push_back(unit);
  }
  timers["stopped"] = stopped;
  timers.erase("to_stop");
  return json{{"files", files}, {"files_changed", files.size()}, {"lines_disabled", lines}, {"timers", timers},
              {"refused", intent.at("refused")}};
}

Result<json> CronStep::verify(const StepContext& ctx, const json& intent, const json&) {
  std::size_t active = 0;
  json scan = scan_active(ctx.root, patterns_, active);
  json files = json::array();
  for (const auto& f : intent.at("files")) {
    auto real = ctx.root.resolve(f.at("path").get<std::string>());
    auto text = real ? read_file(*real) : Result<std::string>(real.error());
    bool same = text && sha256_hex(*text) == f.at("sha256_after").get<std::string>();
    files.push_back({{"path", f.at("path")}, {"as_applied", same}});
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
  const auto& files = intent.at("files");
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    const auto& f = *it;
    const auto host = f.at("path").get<std::string>();
    const auto before = f.at("sha256_before").get<std::string>();
    FileOwner owner{f.at("mode").get<mode_t>(), f.at("uid").get<uid_t>(), f.at("gid").get<gid_t>()};
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
    auto ref = BlobRef::from_json(f.at("backup"));
    auto bytes = ref ? ctx.journal.load_blob(*ref) : Result<std::string>(ref.error());
    if (!bytes) {
      errors.push_back(bytes.error());
      continue;
    }
    // A restore killed mid-rewrite leaves the original plus blank lines: finish it.
    const bool interrupted = text && is_rewrite_leftover(*text, *bytes);
    if (now != f.at("sha256_after").get<std::string>() && !interrupted) {
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
  for (const auto& unit : intent.at("timers").value("to_stop", json::array())) {
    int rc = 1;
    auto out = run_systemctl("start", unit.get<std::string>(), rc);
    if (!out || rc != 0) errors.push_back(plain_error(unit.get<std::string>(), "systemctl start failed"));
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
