// A real OpenSSH server for tests: its own host key, config and authorized_keys in a temporary
// directory, listening on one address (a random free port on loopback, or port 22 inside a
// network namespace). Plus the small process helpers the enrolment tests share.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::test {

namespace fs = std::filesystem;

// Why this machine cannot run an sshd for tests (no sshd, no ssh-keygen), or nothing.
std::optional<std::string> sshd_unavailable();

struct Ran {
  int status = -1;  // exit status, or 128+signal
  std::string out;
  std::string err;
};
// Runs argv (no shell), with extra environment entries "K=V" (an entry "K=" removes K).
Ran run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

std::string slurp(const fs::path& p);
void spit(const fs::path& p, const std::string& s);

// A fresh ed25519 key pair at `path` (private) and `path`.pub.
void make_key(const fs::path& path);

struct SshdOptions {
  std::string address = "127.0.0.1";
  std::string netns;          // non-empty: run inside `ip netns exec NETNS`, on port 22
  std::string force_command;  // sshd ForceCommand (a wrapper that sees SSH_ORIGINAL_COMMAND)
};

class Sshd {
 public:
  Sshd(const fs::path& dir, SshdOptions o = {});
  ~Sshd();
  Sshd(const Sshd&) = delete;
  Sshd& operator=(const Sshd&) = delete;

  int port() const { return port_; }
  const std::string& address() const { return o_.address; }
  void authorize(const fs::path& public_key);  // appends to authorized_keys
  // "[addr]:port ssh-ed25519 AAAA..." (or "addr ..." on port 22), as known_hosts wants it.
  std::string known_hosts_line() const;
  // "SHA256:...", from ssh-keygen -l: what enroll must show for an unknown host.
  std::string fingerprint() const;
  const fs::path& host_public_key() const { return host_pub_; }
  std::string log() const { return slurp(dir_ / "sshd.log"); }

 private:
  void start();
  fs::path dir_;
  SshdOptions o_;
  fs::path host_pub_;
  int port_ = 22;
  pid_t pid_ = -1;
};

}  // namespace tandem::test
