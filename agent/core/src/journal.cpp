#include "tandem/agent/journal.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <ctime>
#include <set>

#include "tandem/agent/fs.hpp"
#include "tandem/agent/sha256.hpp"

namespace tandem::agent {
namespace {

constexpr const char* kBlobDir = "blobs";

std::string now_utc() {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

std::optional<Record> parse_record(const std::string& line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    auto phase = phase_from_string(j.at("phase").get<std::string>());
    if (!phase) return std::nullopt;
    // get<uint64_t>() of a float or negative number is a cast (UB past the range), not an error.
    if (!j.at("seq").is_number_unsigned()) return std::nullopt;
    return Record{j.at("seq").get<std::uint64_t>(), j.at("time").get<std::string>(), j.at("op_id").get<std::string>(),
                  j.at("step").get<std::string>(), *phase, j.value("data", nlohmann::json())};
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

const char* to_string(Phase p) {
  switch (p) {
    case Phase::intent: return "intent";
    case Phase::applied: return "applied";
    case Phase::verified: return "verified";
    case Phase::undone: return "undone";
    case Phase::failed: return "failed";
    case Phase::released: return "released";
  }
  return "?";
}

std::optional<Phase> phase_from_string(std::string_view s) {
  for (Phase p : {Phase::intent, Phase::applied, Phase::verified, Phase::undone, Phase::failed, Phase::released})
    if (s == to_string(p)) return p;
  return std::nullopt;
}

nlohmann::json Record::to_json() const {
  return {{"seq", seq}, {"time", time}, {"op_id", op_id}, {"step", step}, {"phase", to_string(phase)}, {"data", data}};
}

nlohmann::json BlobRef::to_json() const { return {{"file", file}, {"sha256", sha256}, {"size", size}}; }

Result<BlobRef> BlobRef::from_json(const nlohmann::json& j) {
  try {
    if (!j.at("size").is_number_unsigned())
      return plain_error("", "journal blob reference is malformed: size " + j.at("size").dump() + " is not a byte count");
    return BlobRef{j.at("file").get<std::string>(), j.at("sha256").get<std::string>(), j.at("size").get<std::uint64_t>()};
  } catch (const nlohmann::json::exception& e) {
    return plain_error("", std::string("journal blob reference is malformed: ") + e.what());
  }
}

bool valid_op_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

Result<std::unique_ptr<Journal>> Journal::open(const std::string& state_dir) {
  const std::string path = state_dir + "/" + kFileName;
  struct stat st {};
  const bool existed = ::lstat(path.c_str(), &st) == 0;
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return sys_error(path, "cannot open journal");
  std::unique_ptr<Journal> j(new Journal(state_dir, fd));
  if (!existed) {
    // A new journal is only durable once its directory entry is.
    if (::fsync(fd) != 0) return sys_error(path, "fsync of new journal failed");
    auto d = fsync_dir(state_dir);
    if (!d) return d.error();
  }
  auto text = read_file(path);
  if (!text) return text.error();
  auto r = j->replay(*text);
  if (!r) return r.error();
  return j;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

Status Journal::replay(const std::string& text) {
  std::size_t pos = 0;
  std::size_t line_no = 0;
  while (pos < text.size()) {
    ++line_no;
    auto nl = text.find('\n', pos);
    const bool last = nl == std::string::npos || nl + 1 >= text.size();
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    auto rec = nl == std::string::npos ? std::nullopt : parse_record(line);
    if (!rec) {
      if (!last) return plain_error(path(), "journal line " + std::to_string(line_no) + " is corrupt (not a record); refusing to guess");
      // A crash mid-append leaves a torn last line: drop it and cut it off, so the next append
      // starts on a clean line. The mutation it announced never started (records precede acts).
      warnings_.push_back("journal line " + std::to_string(line_no) + " is torn (" + std::to_string(text.size() - pos) +
                          " bytes); ignored");
      spdlog::warn("{}: {}", path(), warnings_.back());
      if (::ftruncate(fd_, static_cast<off_t>(pos)) != 0 || ::fsync(fd_) != 0)
        return sys_error(path(), "cannot cut the torn last line off the journal");
      break;
    }
    records_.push_back(std::move(*rec));
    pos = nl + 1;
  }
  return Ok{};
}

Result<Record> Journal::append(const std::string& op_id, const std::string& step, Phase phase, nlohmann::json data) {
  if (!valid_op_id(op_id)) return plain_error(path(), "invalid op id '" + op_id + "' (use [A-Za-z0-9._-], at most 64)");
  Record r{records_.empty() ? 1 : records_.back().seq + 1, now_utc(), op_id, step, phase, std::move(data)};
  std::string line = r.to_json().dump() + "\n";
  auto w = write_all(fd_, line, path());  // O_APPEND: one write per record
  if (!w) return w.error();
  if (::fsync(fd_) != 0) return sys_error(path(), "fsync of journal failed");
  records_.push_back(r);
  return r;
}

std::vector<Record> Journal::records_for(const std::string& op_id) const {
  std::vector<Record> out;
  for (const auto& r : records_)
    if (r.op_id == op_id) out.push_back(r);
  return out;
}

std::optional<Record> Journal::last(const std::string& op_id, Phase phase) const {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it)
    if (it->op_id == op_id && it->phase == phase) return *it;
  return std::nullopt;
}

std::vector<std::string> Journal::ops_to_undo() const {
  std::vector<std::string> order;
  std::set<std::string> seen, undone;
  for (const auto& r : records_) {
    if (r.phase == Phase::undone || r.phase == Phase::released) undone.insert(r.op_id);
    if (r.phase == Phase::intent && seen.insert(r.op_id).second) order.push_back(r.op_id);
  }
  std::vector<std::string> out;
  for (const auto& id : order)
    if (!undone.count(id)) out.push_back(id);
  return out;
}

Result<BlobRef> Journal::save_blob(const std::string& op_id, std::string_view bytes) {
  if (!valid_op_id(op_id)) return plain_error(path(), "invalid op id '" + op_id + "'");
  const std::string bdir = dir_ + "/" + kBlobDir;
  if (::mkdir(bdir.c_str(), 0700) == 0) {
    auto d = fsync_dir(dir_);
    if (!d) return d.error();
  } else if (errno != EEXIST) {
    return sys_error(bdir, "cannot create blob directory");
  }
  // Names never repeat, even across restarts: O_EXCL tells us when one is taken.
  for (;;) {
    std::string rel = std::string(kBlobDir) + "/" + op_id + "." + std::to_string(++blob_counter_) + ".bak";
    auto c = create_file_synced(dir_ + "/" + rel, bytes, 0600);
    if (c) return BlobRef{rel, sha256_hex(bytes), bytes.size()};
    if (c.error().sys_errno != EEXIST) return c.error();
  }
}

Result<std::string> Journal::load_blob(const BlobRef& ref) const {
  auto bytes = read_file(dir_ + "/" + ref.file);
  if (!bytes) return bytes.error();
  auto got = sha256_hex(*bytes);
  if (got != ref.sha256 || bytes->size() != ref.size)
    return plain_error(dir_ + "/" + ref.file, "backup does not match the journal (sha256 " + got + ", journal says " + ref.sha256 + ")");
  return bytes;
}

}  // namespace tandem::agent
