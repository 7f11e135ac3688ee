#include "tandem/agent/cron_scan.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

namespace tandem::agent {
namespace {

// Splits on '\n' keeping each line's bytes (including a trailing '\r'); the last piece has no
// newline (empty when the file ends with one).
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    auto nl = s.find('\n', pos);
    if (nl == std::string::npos) {
      out.push_back(s.substr(pos));
      return out;
    }
    out.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
}

std::vector<std::string> list_dir_sorted(const std::string& real_dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(real_dir.c_str());
  if (!d) return names;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.empty() || n[0] == '.') continue;
    names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string cron_marker(const std::string& op_id) { return "#tandem-disabled op=" + op_id + "# "; }

std::vector<CronMatch> find_cron_matches(const std::string& content, const std::vector<std::string>& patterns) {
  std::vector<CronMatch> out;
  auto lines = split_lines(content);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string text = lines[i];
    if (!text.empty() && text.back() == '\r') text.pop_back();
    auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos || text[first] == '#') continue;
    for (const auto& p : patterns) {
      if (!p.empty() && text.find(p) != std::string::npos) {
        out.push_back({i + 1, text, p});
        break;
      }
    }
  }
  return out;
}

std::string disable_cron_lines(const std::string& content, const std::vector<CronMatch>& matches, const std::string& op_id) {
  std::set<std::size_t> targets;
  for (const auto& m : matches) targets.insert(m.line);
  auto lines = split_lines(content);
  std::string out;
  out.reserve(content.size() + matches.size() * 40);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (targets.count(i + 1)) out += cron_marker(op_id);
    out += lines[i];
    if (i + 1 < lines.size()) out += '\n';
  }
  return out;
}

std::vector<std::string> list_cron_files(const NodeRoot& root, std::vector<Error>& refused) {
  std::vector<std::string> files;
  auto consider = [&](const std::string& host) {
    auto entry = root.resolve_entry(host);
    struct stat st {};
    if (!entry || ::lstat(entry->c_str(), &st) != 0) return;  // absent: nothing to scan
    auto real = root.resolve(host);
    if (!real) {
      refused.push_back(real.error());
      return;
    }
    if (::stat(real->c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(host);
  };
  consider("/etc/crontab");
  for (const char* dir : {"/etc/cron.d", "/var/spool/cron/crontabs"}) {
    auto real = root.resolve(dir);
    if (!real) continue;
    for (const auto& n : list_dir_sorted(*real)) consider(std::string(dir) + "/" + n);
  }
  return files;
}

}  // namespace tandem::agent
