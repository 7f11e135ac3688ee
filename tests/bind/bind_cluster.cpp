#include "bind_cluster.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tandem/net/http_client.hpp"
#include "tandem/net/pki.hpp"

namespace bindtest {

using namespace std::chrono_literals;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

bool port_answers(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[64] = {};
      ssize_t n = ::read(fd, buf, sizeof buf - 1);
      ok = n > 12 && std::string(buf, static_cast<size_t>(n)).starts_with("HTTP/1.1 200");
    }
  }
  ::close(fd);
  return ok;
}

std::vector<pid_t> processes_with(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    std::string cmd = slurp(e.path() / "cmdline");
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

Cluster::Cluster(ClusterOptions o) : opt_(o) {
  dir = fs::temp_directory_path() / ("tandem-bind-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  pki = dir / "pki";
  state = dir / "ctl-state";
  serve_port = free_port();
  rendezvous_port = free_port();
  std::vector<tandem::net::NodeSpec> specs{{"rank0", {"127.0.0.1"}}, {"rank1", {"127.0.0.2"}}};
  specs.resize(static_cast<size_t>(opt_.nodes));
  auto made = tandem::net::init_cluster_pki(pki, "controller", specs);
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));

  // One demo model, copied into each root so every rank hashes the same bytes.
  std::string out;
  const std::string model = (dir / "model").string();
  const std::string cmd = std::string(TANDEM_SERVE_BIN) + " --write-demo-model " + model + " > /dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string engine_script =
      "#!/bin/sh\n# test engine: a worker (--headless) that never becomes ready; the head is tandem-serve\n"
      "case \" $* \" in *\" --headless \"*) exec /bin/sleep 987654 ;; esac\nexec " +
      std::string(TANDEM_SERVE_BIN) + " \"$@\"\n";
  for (int i = 0; i < opt_.nodes; ++i) {
    const fs::path r = root(i);
    write(r / "etc/crontab", expected_crontab());
    write(r / "dev/shm/tandem-test-1", std::string(1000, 'x'));
    write(r / "proc/meminfo", "MemTotal: 32000000 kB\nMemAvailable: 20000000 kB\n");
    write(r / "proc/sys/vm/drop_caches", "");
    // All nodes share this machine's loopback: a worker's own (empty) socket table keeps it from
    // seeing the head's old lane as its own. The head probes for real (no table: it connects).
    if (i > 0)
      write(r / "proc/net/tcp", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n");
    fs::create_directories(r / "usr/local/bin");
    fs::copy_file(TANDEM_SERVE_BIN, r / "usr/local/bin/tandem-serve");
    write(r / "usr/local/bin/tandem-engine", engine_script);
    fs::permissions(r / "usr/local/bin/tandem-engine", fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
    fs::create_directories(r / "models");
    fs::copy(model, r / "models/tiny", fs::copy_options::recursive);
    agent_ports.push_back(free_port(i == 0 ? "127.0.0.1" : "127.0.0.2"));
  }

  std::ostringstream m;
  m << "apiVersion: tandem/v1\nkind: Bind\nmetadata: {name: bindtest}\nnodes:\n";
  for (int i = 0; i < opt_.nodes; ++i)
    m << "  - {name: rank" << i << ", address: 127.0.0." << i + 1 << ", role: " << (i == 0 ? "head" : "worker")
      << ", agent: {port: " << agent_ports[static_cast<size_t>(i)] << "}, root: " << root(i).string() << "}\n";
  m << "engine:\n  binary: /usr/local/bin/" << (opt_.hang_worker ? "tandem-engine" : "tandem-serve")
    << "\n  model_dir: /models/tiny\n  run_user: root\n  cache_dir: /var/cache/tandem\n"
    << "  serve: {served_model_name: tiny, host: 127.0.0.1, port: " << serve_port << ", tensor_parallel_size: " << opt_.nodes
    << ", gpu_memory_utilization: 0.5, device: cpu, enable_auto_tool_choice: true, tool_call_parser: glm47}\n"
    << "  rendezvous: {port: " << rendezvous_port << ", timeout: 4s}\n"
    << "hygiene:\n  cron: {patterns: ['" << serve_port << "'], systemd_timers: false}\n"
    << "  stop:\n    commands:\n      - {on: head, timeout: 1m, run: [/bin/sh, -c, 'echo stop >> " << (dir / "stops").string()
    << "; sleep " << opt_.stop_sleep_s << "; kill $(cat " << (dir / "old.pid").string() << ")']}\n"
    << "    port_dark_timeout: 10s\n  shm: {patterns: ['tandem-test-*']}\n"
    << "  page_cache: {drop: true, min_mem_available: 1GiB}\n"
    << (opt_.gates == "off"  ? "gates: {serve_timeout: 60s, health: false, models: false, chat: false, tool_call: false, json: false}\n"
        : opt_.gates == "on" ? "gates: {serve_timeout: 60s}\n"
        : opt_.gates == "bench"
            ? "gates: {serve_timeout: 60s, models: false, chat: false, tool_call: false, json: false, "
              "bench: {concurrency: 2, max_tokens: 8}}\n"
        : opt_.gates.starts_with("custom")
            ? "gates:\n  serve_timeout: 60s\n  models: false\n  chat: false\n  tool_call: false\n  json: false\n  custom:\n"
              "    - {name: listed, http: {url: /v1/models, expect_body_contains: tiny, expect_json: {path: /object, equals: list}}}\n"
              "    - {name: route, command: {on: head, run: [/bin/sh, -c, 'echo FINAL_ROUTE_OK'], expect_output_contains: " +
                  std::string(opt_.gates == "custom_fail" ? "FINAL_ROUTE_NOPE" : "FINAL_ROUTE_OK") + "}}\n"
                             : "gates: {serve_timeout: 60s, long_retrieval: {context_tokens: 256, require_needle: true}}\n")
    << "deadman: {delay: " << opt_.deadman << ", backend: agent}\n"
    << "rollback:\n  commands:\n    - {on: head, timeout: 30s, run: [/bin/sh, -c, '" << old_lane_command() << "']}\n"
    << "  verify: {url: 'http://127.0.0.1:" << serve_port << "/health', timeout: " << opt_.verify_timeout << "}\n"
    << opt_.stage;
  write(manifest_path(), m.str());
  for (int i = 0; i < opt_.nodes; ++i) start_agent(i);
}

std::string Cluster::expected_crontab() const {
  std::string c = original_crontab;
  c.replace(c.find("SERVE_PORT"), 10, std::to_string(serve_port));
  return c;
}

std::string Cluster::old_lane_command() const {
  return "echo start >> " + (dir / "starts").string() + "; " + std::string(TANDEM_SERVE_BIN) + " " + (root(0) / "models/tiny").string() + " --device cpu --host 127.0.0.1 --port " +
         std::to_string(serve_port) + " > " + (dir / "old.log").string() + " 2>&1 < /dev/null & echo $! > " +
         (dir / "old.pid").string();
}

void Cluster::start_old_lane() {
  REQUIRE(std::system(("/bin/sh -c '" + old_lane_command() + "'").c_str()) == 0);
  for (int i = 0; i < 200 && !port_answers(serve_port); ++i) std::this_thread::sleep_for(50ms);
  REQUIRE_MESSAGE(port_answers(serve_port), "the old lane did not come up: " << slurp(dir / "old.log"));
}

namespace {
int lines_in(const fs::path& p) {
  const std::string s = slurp(p);
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}
}  // namespace

int Cluster::stop_count() const { return lines_in(dir / "stops"); }
int Cluster::start_count() const { return lines_in(dir / "starts"); }

void Cluster::kill_agent(int i) {
  pid_t& p = agents.at(static_cast<size_t>(i));
  if (p <= 0) return;
  ::kill(p, SIGKILL);
  ::waitpid(p, nullptr, 0);
  p = -1;
}

void Cluster::restart_agent(int i) {
  kill_agent(i);
  start_agent(i);
}

std::vector<pid_t> Cluster::ranks(int i) const {
  std::vector<pid_t> out;
  for (pid_t p : processes_with(root(i).string() + "/"))
    if (slurp("/proc/" + std::to_string(p) + "/cmdline").find("--node-rank") != std::string::npos) out.push_back(p);
  return out;
}

void Cluster::start_agent(int i) {
  const std::string addr = "127.0.0." + std::to_string(i + 1);
  const std::string listen = addr + ":" + std::to_string(agent_ports[static_cast<size_t>(i)]);
  const std::string node = "rank" + std::to_string(i), r = root(i).string(), p = pki.string();
  const std::string log = (dir / (node + "-tandemd.log")).string();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(TANDEMD_BIN, TANDEMD_BIN, "serve", "--node", node.c_str(), "--root", r.c_str(), "--listen", listen.c_str(),
            "--pki-dir", p.c_str(), "--allow-exec", "/usr/local/bin/tandem-serve", "--allow-exec",
            "/usr/local/bin/tandem-engine", "--allow-exec", "/bin/sh", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  agents.resize(std::max(agents.size(), static_cast<size_t>(i) + 1), -1);
  agents[static_cast<size_t>(i)] = pid;
  tandem::net::ClientOptions o;
  tandem::net::PkiLayout l{pki};
  o.ca_file = l.ca_cert();
  o.cert_file = l.controller_cert();
  o.key_file = l.controller_key();
  auto c = tandem::net::HttpsClient::create(o);
  REQUIRE(c.ok());
  for (int k = 0; k < 200; ++k) {
    if (c.value().get({addr, agent_ports[static_cast<size_t>(i)], node}, "/v1/health").ok()) return;
    std::this_thread::sleep_for(50ms);
  }
  FAIL("tandemd " << node << " did not come up: " << slurp(log));
}

namespace {

// tandemctl ARGS --state-dir STATE --pki-dir PKI, not waited for: stdout to `out`, stderr to `err`
// (the same file when equal), with `env` ("NAME=value") added to its environment.
pid_t spawn_ctl(const std::vector<std::string>& args, const fs::path& state, const fs::path& pki, const fs::path& out,
                const fs::path& err, const std::vector<std::string>& env) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));  // the child's own copy of `env`
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int efd = err == out ? fd : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(efd, 2);
    std::vector<std::string> full{TANDEMCTL_BIN};
    full.insert(full.end(), args.begin(), args.end());
    full.insert(full.end(), {"--state-dir", state.string(), "--pki-dir", pki.string()});
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(TANDEMCTL_BIN, argv.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

int Cluster::ctl(const std::vector<std::string>& args, std::string& out, bool split_stdout) const {
  const fs::path log = dir / "ctl.out";
  const pid_t pid = spawn_ctl(args, state, pki, log, split_stdout ? dir / "ctl.err" : log, {});
  int st = 0;
  ::waitpid(pid, &st, 0);
  out = slurp(log);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

pid_t Cluster::ctl_background(const std::vector<std::string>& args, const fs::path& log,
                              const std::vector<std::string>& env) const {
  return spawn_ctl(args, state, pki, log, log, env);
}

Cluster::~Cluster() {
  for (pid_t p : agents) {
    if (p <= 0) continue;
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  // Ranks and old lanes run from paths under dir; the hanging worker is marked 987654.
  for (const auto& needle : {dir.string(), std::string("987654")})
    for (pid_t p : processes_with(needle)) ::kill(p, SIGKILL);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace bindtest
