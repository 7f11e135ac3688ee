// A throw-away node root under /tmp with the host layout the steps expect, and CoreOptions for
// an agent confined to it. Files are real: every test reads and writes the file system.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tandem/agent/agent_core.hpp"

namespace sandbox {

namespace fs = std::filesystem;

struct Sandbox {
  std::string root;
  Sandbox() {
    char tmpl[] = "/tmp/tandem-core-XXXXXX";
    root = ::mkdtemp(tmpl);
    ::chmod(root.c_str(), 0755);  // so a dropped-privilege child can walk it
  }
  ~Sandbox() {
    std::error_code ec;
    fs::remove_all(root, ec);  // does not follow symlinks
  }
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  std::string p(const std::string& host) const { return root + host; }
  void mkdir(const std::string& host) const { fs::create_directories(p(host)); }
  void write(const std::string& host, const std::string& bytes, mode_t mode = 0644) const {
    mkdir(fs::path(host).parent_path().string());
    std::ofstream(p(host), std::ios::binary | std::ios::trunc) << bytes;
    ::chmod(p(host).c_str(), mode);
  }
  std::string read(const std::string& host) const {
    std::ifstream in(p(host), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  mode_t mode(const std::string& host) const {
    struct stat st {};
    ::lstat(p(host).c_str(), &st);
    return st.st_mode & 07777;
  }
  bool exists(const std::string& host) const {
    struct stat st {};
    return ::lstat(p(host).c_str(), &st) == 0;
  }
};

inline tandem::agent::CoreOptions options(const Sandbox& sb) {
  tandem::agent::CoreOptions o;
  o.root = sb.root;
  o.state_dir = "/var/lib/tandemd";
  o.engine.binary = "/opt/tandem/bin/tandem-serve";
  o.engine.model_dir = "/models/target";
  o.engine.drafter_dir = "/models/drafter";
  o.engine.cache_dir = "/home/llm/.cache/vllm";
  o.engine.run_user = "";
  o.engine.pins.push_back({"/opt/glm/chat-template.jinja", "", {}});
  o.engine.serve.port = 8888;
  o.hygiene.cron_patterns = {":8888", "inference-watchdog"};
  o.hygiene.port_dark_timeout = std::chrono::milliseconds(300);
  return o;
}

inline std::unique_ptr<tandem::agent::AgentCore> open_core(const tandem::agent::CoreOptions& o) {
  auto c = tandem::agent::AgentCore::open(o);
  if (!c) throw std::runtime_error(c.error().text());
  return std::move(*c);
}

}  // namespace sandbox
