#include "serve_harness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace tandem::serve_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int wait_status(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int run_serve(const std::vector<std::string>& args, std::string& output) {
  char tmpl[] = "/tmp/tandem-serve-run-XXXXXX";
  const int fd = mkstemp(tmpl);
  close(fd);
  std::vector<std::string> full{TANDEM_SERVE_BIN};
  full.insert(full.end(), args.begin(), args.end());
  const int rc = wait_status(spawn(full, tmpl));
  output = read_file(tmpl);
  std::filesystem::remove(tmpl);
  return rc;
}

pid_t spawn_serve(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<std::string> full{TANDEM_SERVE_BIN};
  full.insert(full.end(), args.begin(), args.end());
  return spawn(full, log);
}

int wait_exit(pid_t pid, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    if (std::chrono::steady_clock::now() >= deadline) return kStillRunning;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string read_text(const std::filesystem::path& p) { return read_file(p); }

void write_demo_model(const std::filesystem::path& dir) {
  std::string out;
  REQUIRE_MESSAGE(run_serve({"--write-demo-model", dir.string()}, out) == 0, out);
}

Server::Server(std::vector<std::string> extra, const std::filesystem::path& model) {
  char tmpl[] = "/tmp/tandem-serve-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  dir_ = tmpl;
  if (model.empty()) write_demo_model(dir_ / "model");
  const std::filesystem::path model_dir = model.empty() ? dir_ / "model" : model;
  port_ = free_port();
  std::vector<std::string> args{TANDEM_SERVE_BIN, model_dir.string(), "--device", "cpu", "--host", "127.0.0.1",
                                "--port", std::to_string(port_)};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_ = spawn(args, dir_ / "serve.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL("tandem-serve exited during start-up:\n" << log());
    }
    try {
      if (request(port_, "GET", "/health").status == 200) return;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("tandem-serve did not answer /health within 20 s:\n" << log());
}

int Server::stop() {
  if (pid_ < 0) return 0;
  kill(pid_, SIGTERM);
  const int rc = wait_status(pid_);
  pid_ = -1;
  return rc;
}

Server::~Server() {
  const int rc = stop();
  if (rc != 0) std::fprintf(stderr, "tandem-serve exited %d:\n%s\n", rc, log().c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string Server::log() const { return read_file(dir_ / "serve.log"); }

Reply request(std::uint16_t port, const std::string& method, const std::string& target, const std::string& body) {
  return request_at("127.0.0.1", port, method, target, body);
}

Reply request_at(const std::string& host, std::uint16_t port, const std::string& method, const std::string& target,
                 const std::string& body) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect(tcp::endpoint(asio::ip::make_address(host), port));
  stream.expires_after(std::chrono::seconds(60));
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  http::read(stream, buf, parser);
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return {parser.get().result_int(), parser.get().body()};
}

Reply post_json(std::uint16_t port, const std::string& target, const nlohmann::json& body) {
  return request(port, "POST", target, body.dump());
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < body.size()) {
    const auto end = body.find("\n\n", at);
    REQUIRE_MESSAGE(end != std::string::npos, "an SSE event without its blank line: " << body.substr(at));
    const std::string ev = body.substr(at, end - at);
    REQUIRE_MESSAGE(ev.rfind("data: ", 0) == 0, "not a data event: " << ev);
    out.push_back(ev.substr(6));
    at = end + 2;
  }
  return out;
}

double metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

}  // namespace tandem::serve_test
