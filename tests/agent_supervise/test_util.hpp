// Small helpers shared by the supervise tests.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "free_port.hpp"

namespace tandem::supervise::test {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/tandem-supervise-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using tandem::test::free_port;

}  // namespace tandem::supervise::test
