#include "tandem/agent/systemd_timers.hpp"

#include <dirent.h>

#include <algorithm>

#include "tandem/agent/command.hpp"
#include "tandem/agent/fs.hpp"

namespace tandem::agent {
namespace {

constexpr const char* kUnitDirs[] = {"/etc/systemd/system", "/lib/systemd/system"};

const std::string* first_pattern_in(const std::string& text, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (!p.empty() && text.find(p) != std::string::npos) return &p;
  return nullptr;
}

// The service a timer triggers: its Unit= line, else the same name with .service.
std::string triggered_service(const std::string& timer_name, const std::string& text) {
  auto pos = text.find("\nUnit=");
  if (pos != std::string::npos) {
    auto end = text.find_first_of("\r\n", pos + 6);
    return text.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6);
  }
  return timer_name.substr(0, timer_name.size() - 6) + ".service";
}

}  // namespace

nlohmann::json TimerMatch::to_json() const {
  return {{"unit", unit}, {"path", host_path}, {"matched_in", matched_in}, {"pattern", pattern}};
}

std::vector<TimerMatch> find_matching_timers(const NodeRoot& root, const std::vector<std::string>& patterns) {
  std::vector<TimerMatch> out;
  for (const char* dir : kUnitDirs) {
    auto real = root.resolve(dir);
    if (!real) continue;
    DIR* d = ::opendir(real->c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (auto* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".timer") == 0) names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const std::string host = std::string(dir) + "/" + n;
      if (const auto* p = first_pattern_in(n, patterns)) {
        out.push_back({n, host, "name", *p});
        continue;
      }
      auto timer_real = root.resolve(host);
      if (!timer_real) continue;  // e.g. a link to /dev/null (masked) or out of the root
      auto text = read_file(*timer_real);
      if (!text) continue;
      if (const auto* p = first_pattern_in(*text, patterns)) {
        out.push_back({n, host, "timer", *p});
        continue;
      }
      const std::string svc_host = std::string(dir) + "/" + triggered_service(n, *text);
      auto svc_real = root.resolve(svc_host);
      auto svc = svc_real ? read_file(*svc_real) : Result<std::string>(plain_error(svc_host, "absent"));
      if (svc)
        if (const auto* p = first_pattern_in(*svc, patterns)) out.push_back({n, host, svc_host, *p});
    }
  }
  return out;
}

std::string why_timers_cannot_be_stopped(const NodeRoot& root) {
  if (!root.is_host_root()) return "node root is " + root.root() + ", not /: a sandbox, so host timers are left alone";
  auto comm = read_file("/proc/1/comm");
  if (!comm) return "cannot read /proc/1/comm to tell whether systemd is PID 1";
  std::string c = *comm;
  while (!c.empty() && (c.back() == '\n' || c.back() == ' ')) c.pop_back();
  if (c != "systemd") return "PID 1 is '" + c + "', not systemd (container?)";
  if (!find_executable("systemctl")) return "systemctl not found";
  return {};
}

}  // namespace tandem::agent
