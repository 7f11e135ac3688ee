#include "tandem/agent/page_cache_step.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "tandem/agent/fs.hpp"

namespace tandem::agent {
namespace {

constexpr const char* kMeminfo = "/proc/meminfo";
constexpr const char* kDrop = "/proc/sys/vm/drop_caches";

json drop_caches(const NodeRoot& root) {
  json ev{{"requested", true}, {"path", kDrop}, {"done", false}, {"refused_by_kernel", false}};
  auto real = root.resolve(kDrop);
  if (!real) {
    ev["reason"] = real.error().text();
    return ev;
  }
  int fd = ::open(real->c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (::write(fd, "3", 1) != 1) err = errno;
    ::close(fd);
  }
  if (err == 0) {
    ev["done"] = true;
    return ev;
  }
  ev["errno"] = err;
  if (err == EACCES || err == EPERM || err == EROFS) {
    ev["refused_by_kernel"] = true;
    ev["reason"] = std::string("the kernel refused the page-cache drop (") + std::strerror(err) +
                   "): no privilege here (container or non-root agent); cache NOT dropped, MemAvailable checked as is";
  } else {
    ev["reason"] = std::string("writing ") + kDrop + " failed: " + std::strerror(err);
  }
  return ev;
}

}  // namespace

std::string gib_text(std::uint64_t bytes) {
  double g = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  double tenth = std::round(g * 10) / 10;
  char buf[48];
  if (tenth == std::floor(tenth)) std::snprintf(buf, sizeof buf, "%.0f GiB", tenth);
  else std::snprintf(buf, sizeof buf, "%.1f GiB", tenth);
  return buf;
}

Result<std::uint64_t> parse_mem_available(const std::string& meminfo, const std::string& path_for_errors) {
  std::istringstream in(meminfo);
  std::string key, unit;
  std::uint64_t value = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    if (!(ls >> key >> value)) continue;
    if (key != "MemAvailable:") continue;
    ls >> unit;
    if (unit == "kB") return value * 1024;
    if (unit.empty()) return value;
    return plain_error(path_for_errors, "MemAvailable has an unknown unit '" + unit + "'");
  }
  return plain_error(path_for_errors, "no MemAvailable line (kernel older than 3.14?)");
}

Result<json> PageCacheStep::memory(const NodeRoot& root, json ev) const {
  auto real = root.resolve(kMeminfo);
  if (!real) return real.error();
  auto text = read_file(*real);
  if (!text) return text.error();
  auto avail = parse_mem_available(*text, kMeminfo);
  if (!avail) return avail.error();
  ev["mem_available_bytes"] = *avail;
  ev["mem_available"] = gib_text(*avail);
  ev["min_required_bytes"] = min_ ? json(*min_) : json(nullptr);
  ev["min_required"] = min_ ? json(gib_text(*min_)) : json(nullptr);
  ev["ok"] = !min_ || *avail >= *min_;
  if (!ev["ok"].get<bool>()) {
    Error e = plain_error(kMeminfo, "MemAvailable " + gib_text(*avail) + " is below the required " + gib_text(*min_));
    set_evidence(e, ev);
    return e;
  }
  return ev;
}

Result<json> PageCacheStep::check(const StepContext& ctx) { return memory(ctx.root, json{{"drop", {{"requested", false}}}}); }

Result<json> PageCacheStep::plan(const StepContext&) {
  return json{{"drop", drop_}, {"min_required_bytes", min_ ? json(*min_) : json(nullptr)}};
}

Result<json> PageCacheStep::apply(const StepContext& ctx, const json&) {
  json ev;
  ::sync();  // dirty pages are not droppable; write them back first
  ev["sync"] = true;
  ev["drop"] = drop_ ? drop_caches(ctx.root) : json{{"requested", false}};
  return memory(ctx.root, ev);
}

Result<json> PageCacheStep::verify(const StepContext& ctx, const json&, const json&) { return memory(ctx.root, json::object()); }

Result<json> PageCacheStep::undo(const StepContext&, const json&) {
  return json{{"undone", false}, {"why", "a dropped page cache refills by itself; nothing to put back"}};
}

}  // namespace tandem::agent
