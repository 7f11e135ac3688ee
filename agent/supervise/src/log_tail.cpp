#include "tandem/supervise/log_tail.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tandem::supervise {

Result<std::vector<std::string>> tail_lines(const std::string& path, std::size_t lines, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error("open log " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return sys_error("stat log " + path, err);
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  std::string data;  // the tail of the file, grown backwards a chunk at a time
  std::size_t pos = size;
  const std::size_t chunk = 64 * 1024;
  auto newlines = [&] { return static_cast<std::size_t>(std::count(data.begin(), data.end(), '\n')); };
  while (pos > 0 && size - pos < max_bytes && newlines() <= lines) {
    std::size_t n = std::min({chunk, pos, max_bytes - (size - pos)});
    pos -= n;
    std::string buf(n, '\0');
    ssize_t got = ::pread(fd, buf.data(), n, static_cast<off_t>(pos));
    if (got < 0) {
      int err = errno;
      ::close(fd);
      return sys_error("read log " + path, err);
    }
    buf.resize(static_cast<std::size_t>(got));
    data.insert(0, buf);
  }
  ::close(fd);
  std::vector<std::string> out;
  std::size_t end = data.size();
  if (end > 0 && data[end - 1] == '\n') --end;  // a final newline does not start an empty line
  while (out.size() < lines && end > 0) {
    std::size_t nl = data.rfind('\n', end - 1);
    std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && pos > 0) break;  // the first line was cut by max_bytes: drop it
    out.push_back(data.substr(begin, end - begin));
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace tandem::supervise
