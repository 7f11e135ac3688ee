#include "sshd_fixture.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace tandem::test {
namespace {

constexpr const char* kSshd = "/usr/sbin/sshd";
constexpr const char* kKeygen = "/usr/bin/ssh-keygen";
constexpr const char* kSftpServer = "/usr/lib/openssh/sftp-server";

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool accepts(const std::string& address, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

std::optional<std::string> sshd_unavailable() {
  for (const char* p : {kSshd, kKeygen, kSftpServer})
    if (::access(p, X_OK) != 0) return std::string(p) + " is missing (Debian: openssh-server, openssh-client)";
  return std::nullopt;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

Ran run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  char out_t[] = "/tmp/tandem-run-out-XXXXXX";
  char err_t[] = "/tmp/tandem-run-err-XXXXXX";
  int out = ::mkstemp(out_t), err = ::mkstemp(err_t);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const auto& x : env)
      if (kv.substr(0, kv.find('=') + 1) == x.substr(0, x.find('=') + 1)) replaced = true;
    if (!replaced) envs.push_back(kv);
  }
  for (const auto& x : env)
    if (x.back() != '=') envs.push_back(x);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out, 1);
    ::dup2(err, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : envs) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    ::execve(a[0], a.data(), e.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ::close(out);
  ::close(err);
  Ran r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = slurp(out_t);
  r.err = slurp(err_t);
  ::unlink(out_t);
  ::unlink(err_t);
  return r;
}

void make_key(const fs::path& path) {
  fs::remove(path);
  fs::remove(path.string() + ".pub");
  auto r = run({kKeygen, "-q", "-t", "ed25519", "-N", "", "-C", "tandem-test", "-f", path.string()});
  if (r.status != 0) throw std::runtime_error("ssh-keygen failed: " + r.err);
}

Sshd::Sshd(const fs::path& dir, SshdOptions o) : dir_(dir), o_(std::move(o)) {
  fs::create_directories(dir_);
  make_key(dir_ / "host_ed25519");
  host_pub_ = dir_ / "host_ed25519.pub";
  spit(dir_ / "authorized_keys", "");
  // sshd refuses to start as root without its privilege-separation directory.
  if (::geteuid() == 0) fs::create_directories("/run/sshd");
  start();
}

void Sshd::start() {
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = o_.netns.empty() ? free_loopback_port() : 22;
    std::string cfg = "Port " + std::to_string(port_) + "\nListenAddress " + o_.address + "\nHostKey " +
                      (dir_ / "host_ed25519").string() + "\nPidFile " + (dir_ / "sshd.pid").string() +
                      "\nAuthorizedKeysFile " + (dir_ / "authorized_keys").string() +
                      "\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                      "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\n"
                      "Subsystem sftp " + std::string(kSftpServer) + "\nLogLevel VERBOSE\n";
    if (!o_.force_command.empty()) cfg += "ForceCommand " + o_.force_command + "\n";
    spit(dir_ / "sshd_config", cfg);
    std::vector<std::string> argv;
    if (!o_.netns.empty()) argv = {"/usr/sbin/ip", "netns", "exec", o_.netns};
    for (const char* a : {kSshd, "-D", "-f"}) argv.push_back(a);
    argv.push_back((dir_ / "sshd_config").string());
    argv.push_back("-E");
    argv.push_back((dir_ / "sshd.log").string());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    for (int i = 0; i < 100; ++i) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;  // exited: port taken, or a config error (the log says)
      }
      if (accepts(o_.address, port_)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  throw std::runtime_error("sshd did not start; its log:\n" + log());
}

Sshd::~Sshd() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  ::waitpid(pid_, nullptr, 0);
}

void Sshd::authorize(const fs::path& public_key) {
  std::ofstream(dir_ / "authorized_keys", std::ios::app) << slurp(public_key);
}

std::string Sshd::known_hosts_line() const {
  std::string key = slurp(host_pub_);
  key = key.substr(0, key.rfind(' '));  // drop the comment
  const std::string host = port_ == 22 ? o_.address : "[" + o_.address + "]:" + std::to_string(port_);
  return host + " " + key + "\n";
}

std::string Sshd::fingerprint() const {
  auto r = run({kKeygen, "-l", "-E", "sha256", "-f", host_pub_.string()});
  std::istringstream in(r.out);
  std::string bits, fp;
  in >> bits >> fp;
  return fp;
}

}  // namespace tandem::test
