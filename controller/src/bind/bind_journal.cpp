#include "bind_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "tandem/names.hpp"

namespace tandem::ctl {

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_bind_id() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "b%Y%m%dT%H%M%SZ", std::gmtime(&t));
  std::random_device rd;
  char hex[8];
  std::snprintf(hex, sizeof hex, "-%04x", static_cast<unsigned>(rd() & 0xffff));
  return std::string(buf) + hex;
}

Result<std::string> bind_dir(const std::string& state_dir, const std::string& bind_name) {
  if (!is_dns_label(bind_name))
    return Error{"bind name '" + printable(bind_name) + "' is not a DNS label (a-z, 0-9, '-'; at most 63 characters); "
                 "refusing to use it as a directory under " + state_dir};
  return state_dir + "/" + bind_name;
}

Result<BindJournal> BindJournal::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{dir + ": cannot create: " + ec.message()};
  BindJournal j(dir);
  std::ifstream in(j.path());
  std::string line;
  int lineno = 0;
  std::uintmax_t good_bytes = 0;  // length of the complete records read so far
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  for (const auto& l : lines) {
    ++lineno;
    if (l.empty()) {
      good_bytes += 1;
      continue;
    }
    auto rec = json::parse(l, nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) {
      if (lineno == static_cast<int>(lines.size())) {
        // Torn by a kill mid-write: never acted on (the controller acts only after the fsync), so
        // cut it off; otherwise the next record would land behind it and the file stop parsing.
        std::error_code tec;
        std::filesystem::resize_file(j.path(), good_bytes, tec);
        if (tec) return Error{j.path() + ": cannot cut off a torn last record: " + tec.message()};
        break;
      }
      return Error{j.path() + ":" + std::to_string(lineno) + ": not a journal record (JSON object)"};
    }
    good_bytes += l.size() + 1;
    j.records_.push_back(std::move(rec));
  }
  return j;
}

Status BindJournal::append(json record) {
  record["t"] = now_ms();
  const std::string line = record.dump() + "\n";
  int fd = ::open(path().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Error{path() + ": " + std::strerror(errno)};
  const std::string& out = line;  // open() cut off any torn last record, so this starts a line
  const char* p = out.data();
  size_t left = out.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return Error{path() + ": write failed: " + std::strerror(err)};
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{path() + ": fsync failed: " + std::strerror(err)};
  }
  ::close(fd);
  records_.push_back(std::move(record));
  return {};
}

namespace {

StepRecord& touch(std::map<std::string, StepRecord>& m, const std::string& k) { return m[k]; }

void apply_step(StepRecord& s, const json& r) {
  const std::string ev = r.value("event", "");
  if (ev.ends_with(".begin")) {
    s.op_id = r.value("op_id", s.op_id);
    s.node = r.value("node", s.node);
    if (!s.started_ms) s.started_ms = r.value("t", 0LL);
    s.failed = false;  // a resumed attempt
  } else if (ev.ends_with(".done")) {
    s.done = true;
    s.failed = false;
    s.evidence = r.value("evidence", json());
    s.note = r.value("note", "");
    s.ended_ms = r.value("t", 0LL);
  } else if (ev.ends_with(".failed")) {
    s.failed = true;
    s.error = r.value("error", "");
    s.evidence = r.value("evidence", json());
    s.ended_ms = r.value("t", 0LL);
  }
}

}  // namespace

void fold(BindRun& run, const json& r) {
  run.events.push_back(r);
  const std::string ev = r.value("event", "");
  if (ev == "bind.begin") {
    run.bind_id = r.value("bind_id", "");
    run.kind = r.value("kind", "bind");
    run.manifest_sha256 = r.value("manifest_sha256", "");
    run.manifest_file = r.value("manifest_file", "");
    run.started_ms = r.value("t", 0LL);
  } else if (ev.starts_with("step.")) {
    apply_step(run.steps[r.value("index", 0)], r);
  } else if (ev == "rollback.begin") {
    run.rollback_begun = true;
    if (run.rollback_reason.empty()) run.rollback_reason = r.value("reason", "");
  } else if (ev.starts_with("rollback.task.")) {
    apply_step(touch(run.rollback, r.value("key", "")), r);
  } else if (ev == "report.written") {
    run.report = r.value("path", "");
  } else if (ev == "bind.end") {
    run.result = r.value("result", "");
    run.ended_ms = r.value("t", 0LL);
  }
}

std::optional<BindRun> last_run(const BindJournal& j) {
  const auto& recs = j.records();
  size_t start = recs.size();
  for (size_t i = recs.size(); i-- > 0;)
    if (recs[i].value("event", "") == "bind.begin") {
      start = i;
      break;
    }
  if (start == recs.size()) return std::nullopt;
  BindRun run;
  run.bind_id = recs[start].value("bind_id", "");
  for (size_t i = start; i < recs.size(); ++i)
    if (recs[i].value("bind_id", "") == run.bind_id) fold(run, recs[i]);
  return run;
}

}  // namespace tandem::ctl
