#include "tandem/agent/stage_landing.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

#include "tandem/agent/sha256.hpp"

namespace tandem::agent {
namespace {

using nlohmann::json;

// How many bytes an earlier run wrote, fdatasynced, before it recorded them, when the sidecar
// describes this same source file and chunk size; 0 otherwise.
std::uint64_t sidecar_length(const std::string& sidecar, const SourceFile& f, std::uint64_t chunk) {
  auto text = read_file(sidecar);
  if (!text) return 0;
  try {
    json j = json::parse(*text);
    if (j.value("sha256", "") != f.sha256 || j.value("size", 0ull) != f.size || j.value("chunk", 0ull) != chunk) return 0;
    const std::uint64_t n = j.at("length").get<std::uint64_t>();
    return n <= f.size && (n % chunk == 0 || n == f.size) ? n : 0;
  } catch (const json::exception&) {
    return 0;  // torn or foreign: start over
  }
}

// The sidecar is rewritten in place after every chunk (one small pwrite, no rename): a killed
// agent loses nothing the kernel already has, and a torn record only means starting over, since
// the whole file's SHA-256 is checked before it lands anyway. Both files are fdatasynced every
// kSyncEvery bytes, so a power cut costs at most that much of the transfer.
constexpr std::uint64_t kSyncEvery = 256ull << 20;
constexpr std::size_t kSidecarBytes = 256;

Status write_sidecar(int fd, const std::string& sidecar, const SourceFile& f, std::uint64_t chunk, std::uint64_t length) {
  std::string rec = json{{"sha256", f.sha256}, {"size", f.size}, {"chunk", chunk}, {"length", length}}.dump();
  rec.resize(std::max(rec.size(), kSidecarBytes), ' ');
  if (::pwrite(fd, rec.data(), rec.size(), 0) != static_cast<ssize_t>(rec.size()))
    return sys_error(sidecar, "cannot record the staged copy's progress");
  return Ok{};
}

Status pwrite_all(int fd, const std::string& bytes, std::uint64_t offset, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(path, "cannot write the staged copy");
    done += static_cast<std::size_t>(n);
  }
  return Ok{};
}

// Feeds the first `length` bytes of the partial to the running hash (the whole file's SHA-256 is
// checked at the end, so a damaged prefix is caught there). Returns the bytes read: fewer when
// the partial is shorter than its sidecar says.
std::uint64_t rehash_prefix(int fd, std::uint64_t length, Sha256& whole, const LandOptions& o) {
  std::vector<char> buf(kHashChunk);
  std::uint64_t done = 0;
  while (done < length) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), length - done));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    whole.update(buf.data(), static_cast<std::size_t>(n));
    done += static_cast<std::uint64_t>(n);
    if (o.on_bytes) o.on_bytes(static_cast<std::uint64_t>(n));
  }
  return done;
}

}  // namespace

std::string partial_path(const std::string& target) {
  return parent_dir(target) + "/." + base_name(target) + ".tandem-partial";
}
std::string sidecar_path(const std::string& target) { return partial_path(target) + ".json"; }

bool is_stage_temp_name(const std::string& n) {
  return n.starts_with(".") && (n.ends_with(".tandem-partial") || n.ends_with(".tandem-partial.json") ||
                                n.ends_with(".tandem-restore"));
}

void RateLimiter::take(std::uint64_t n) {
  if (rate_ == 0) return;
  std::chrono::steady_clock::time_point due;
  {
    std::lock_guard lock(mu_);
    taken_ += n;
    due = start_ + std::chrono::microseconds(taken_ * 1000000 / rate_);
  }
  std::this_thread::sleep_until(due);
}

void remove_partial(const std::string& real_target) {
  ::unlink(partial_path(real_target).c_str());
  ::unlink(sidecar_path(real_target).c_str());
}

Result<LandResult> land_file(StageSource& src, const SourceFile& f, const std::string& real_target, const LandOptions& o) {
  const std::string partial = partial_path(real_target), sidecar = sidecar_path(real_target);
  LandResult res;
  Sha256 whole;
  const std::uint64_t recorded = sidecar_length(sidecar, f, o.chunk);
  OwnedFd fd{::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)};
  if (fd.fd < 0) return sys_error(partial, "cannot create the staged copy beside the target");
  // Anything past what the sidecar vouches for is dropped: the partial is only as good as its record.
  std::uint64_t offset = rehash_prefix(fd.fd, recorded, whole, o);
  if (offset != recorded) {  // shorter than recorded: start over rather than trust a torn prefix
    whole.reset();
    offset = 0;
  }
  res.resumed = offset;
  if (::ftruncate(fd.fd, static_cast<off_t>(offset)) != 0) return sys_error(partial, "cannot truncate the staged copy");
  OwnedFd side{::open(sidecar.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)};
  if (side.fd < 0) return sys_error(sidecar, "cannot create the staged copy's sidecar");
  std::uint64_t synced = offset;
  auto fail = [&](Error e) {
    ::close(fd.fd);
    fd.fd = -1;
    ::close(side.fd);
    side.fd = -1;
    remove_partial(real_target);
    if (e.sys_errno == ENOSPC || e.sys_errno == EDQUOT)
      e.message += "; the file system holding it is full. The partial copy was removed and the target is unchanged";
    return e;
  };
  while (offset < f.size) {
    const std::uint64_t want = std::min(o.chunk, f.size - offset);
    if (o.limiter) o.limiter->take(want);
    auto bytes = src.read(f, offset, want);
    if (!bytes) {
      Error e = bytes.error();
      // A changed source poisons the partial; a lost link keeps it for the next run to resume.
      if (e.message.find("changed on the source") != std::string::npos) return fail(e);
      // The operator must learn which file stopped, and how far it got: name it when the source
      // (a lost connection says only where it was going) did not.
      if (e.where.empty()) {
        e.where = f.path;
        e.message += " (at byte " + std::to_string(offset) + " of " + std::to_string(f.size) +
                     "; the chunks before it are recorded beside the target for the next stage)";
      }
      return e;
    }
    if (bytes->size() != want) return fail(plain_error(f.path, "the source sent " + std::to_string(bytes->size()) +
                                                               " bytes for a chunk of " + std::to_string(want)));
    if (auto w = pwrite_all(fd.fd, *bytes, offset, partial); !w) return fail(w.error());
    whole.update(bytes->data(), bytes->size());
    offset += want;
    if (offset - synced >= kSyncEvery) {  // data first, then the record that vouches for it
      if (::fdatasync(fd.fd) != 0 || ::fdatasync(side.fd) != 0) return fail(sys_error(partial, "fdatasync failed"));
      synced = offset;
    }
    if (auto w = write_sidecar(side.fd, sidecar, f, o.chunk, offset); !w) return fail(w.error());
    res.fetched += want;
    if (o.on_bytes) o.on_bytes(want);
  }
  const std::string got = whole.hex_final();
  if (got != f.sha256)
    return fail(plain_error(f.path, "the copy hashes to " + got + ", not to the source's " + f.sha256 +
                                        ": it changed on the source during the transfer (or the partial copy was "
                                        "damaged); refused, the target is unchanged"));
  // Owner first, then mode: chown clears set-id bits.
  if (::fchown(fd.fd, o.owner.uid, o.owner.gid) != 0 && o.owner.uid != ::geteuid())
    return fail(sys_error(partial, "cannot give the staged copy its owner"));
  if (::fchmod(fd.fd, o.owner.mode) != 0 || ::fsync(fd.fd) != 0) return fail(sys_error(partial, "cannot set mode or fsync"));
  if (::rename(partial.c_str(), real_target.c_str()) != 0) return fail(sys_error(real_target, "cannot rename the staged copy into place"));
  if (auto d = fsync_dir(parent_dir(real_target)); !d) return d.error();
  ::unlink(sidecar.c_str());
  return res;
}

}  // namespace tandem::agent
