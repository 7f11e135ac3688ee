// Runs the real tandem-serve binary on the demo model (written by --write-demo-model into a temp
// dir) on a free loopback port, and talks to it over real HTTP with Boost.Beast.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "free_port.hpp"

namespace tandem::serve_test {

struct Reply {
  unsigned status = 0;
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

class Server {
 public:
  // Writes the demo model (or takes `model`, a directory) and starts
  // `tandem-serve DIR --device cpu --port P ... extra`; waits for /health. Fails the test
  // (REQUIRE) when it does not come up.
  explicit Server(std::vector<std::string> extra, const std::filesystem::path& model = {});
  ~Server();  // SIGTERM, and checks it exited 0
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::string log() const;
  int stop();  // SIGTERM and wait; the exit status (or -signal)

 private:
  std::filesystem::path dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// Runs the binary to completion: exit status and what it printed (stdout and stderr).
int run_serve(const std::vector<std::string>& args, std::string& output);

// Starts tandem-serve with `args` (the binary is prepended), stdout and stderr into `log`.
pid_t spawn_serve(const std::vector<std::string>& args, const std::filesystem::path& log);
// Waits at most `timeout_ms` for the process: its exit status (or -signal); kStillRunning if it
// did not exit in time.
constexpr int kStillRunning = -1000;
int wait_exit(pid_t pid, int timeout_ms);
std::string read_text(const std::filesystem::path& p);
// The demo model (seeded, so every call writes the same weights) into `dir`.
void write_demo_model(const std::filesystem::path& dir);

using tandem::test::free_port;
Reply request(std::uint16_t port, const std::string& method, const std::string& target, const std::string& body = "");
Reply request_at(const std::string& host, std::uint16_t port, const std::string& method, const std::string& target,
                 const std::string& body = "");
Reply post_json(std::uint16_t port, const std::string& target, const nlohmann::json& body);
// The "data: " payloads of an SSE body, in order ("[DONE]" included as a string).
std::vector<std::string> sse_events(const std::string& body);
// A metric's value in Prometheus text ("name" or "name{labels}"); -1 when absent.
double metric(const std::string& text, const std::string& series);

}  // namespace tandem::serve_test
