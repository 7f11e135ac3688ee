#include "node_facts.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tandem/supervise/process.hpp"

namespace tandem::agentd {
namespace {

using nlohmann::json;

std::string under(const std::string& root, const std::string& host) { return root == "/" ? host : root + host; }

json mem_available(const std::string& root) {
  std::ifstream in(under(root, "/proc/meminfo"));
  std::string key;
  long long kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return json{{"mem_available_bytes", kib * 1024}};
  return json{{"mem_available_bytes", nullptr}, {"error", "MemAvailable not found in " + under(root, "/proc/meminfo")}};
}

json disk(const std::string& path) {
  struct statvfs st {};
  if (path.empty() || ::statvfs(path.c_str(), &st) != 0) return json{{"path", path}, {"free_bytes", nullptr}};
  return json{{"path", path}, {"free_bytes", static_cast<unsigned long long>(st.f_bavail) * st.f_frsize}};
}

json gpus() {
  const char* smi = "/usr/bin/nvidia-smi";
  if (::access(smi, X_OK) != 0) return json{{"tool", nullptr}, {"note", "no nvidia-smi on this node"}};
  supervise::RunOptions o;
  o.argv = {smi, "--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits"};
  o.timeout = std::chrono::seconds(10);
  auto r = supervise::run_capture(o);
  if (!r || !r.value().status.success())
    return json{{"tool", smi}, {"error", r ? r.value().output : r.error().message}};
  json list = json::array();
  std::istringstream lines(r.value().output);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) f.push_back(cell.substr(cell.find_first_not_of(' ')));
    if (f.size() == 4)
      list.push_back({{"index", f[0]}, {"name", f[1]}, {"memory_used_mib", f[2]}, {"memory_total_mib", f[3]}});
  }
  return json{{"tool", smi}, {"devices", list}};
}

// TCP ports in LISTEN state (st 0A) from /proc/net/tcp{,6} under the root: the serving port of an
// old lane still up, a stray rank's rendezvous port, the agent itself.
json listening_ports(const std::string& root) {
  std::vector<long> ports;
  for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(under(root, f));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream cols(line);
      std::string sl, local, remote, state;
      if (!(cols >> sl >> local >> remote >> state) || state != "0A") continue;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      const long port = std::strtol(local.c_str() + colon + 1, nullptr, 16);
      if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
    }
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

}  // namespace

json node_facts(const std::string& root, const std::string& state_dir, const std::string& cache_dir_host) {
  json f = mem_available(root);
  f["disk"] = json::array({disk(state_dir)});
  if (!cache_dir_host.empty()) f["disk"].push_back(disk(under(root, cache_dir_host)));
  f["gpus"] = gpus();
  f["listening_tcp_ports"] = listening_ports(root);
  return f;
}

}  // namespace tandem::agentd
