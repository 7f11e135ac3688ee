#include "fault_pause.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tandem::ctl {

namespace {

bool armed_at(const std::string& point) {
  const char* env = std::getenv("TANDEM_FAULT_PAUSE");
  if (!env || !*env) return false;
  std::istringstream in(env);
  for (std::string p; std::getline(in, p, ',');)
    if (p == point) return true;
  return false;
}

}  // namespace

void fault_pause(const std::string& bind_dir, const std::string& point) {
  if (!armed_at(point)) return;
  namespace fs = std::filesystem;
  const fs::path marker = fs::path(bind_dir) / "paused";
  {
    // Written whole under another name first: a test that sees the marker reads the whole point.
    std::ofstream(marker.string() + ".tmp") << point << "\n";
  }
  std::error_code ec;
  fs::rename(marker.string() + ".tmp", marker, ec);
  if (ec) return;  // no marker, no pause: the test waiting for it fails with its own message
  while (fs::exists(marker, ec)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace tandem::ctl
