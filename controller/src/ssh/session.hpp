// One SSH connection to a node, on libssh: connect, check the host key against a known_hosts
// file (strictly: an unknown key is refused unless the caller accepts new keys, a changed key
// is always refused), authenticate with a key, then run commands and copy files over it.
// ~/.ssh/config is NOT read: what tandemctl connects to is exactly what the manifest says.
#pragma once
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem::ssh {

struct Target {
  std::string host;
  int port = 22;
  std::string user;
};

// What checking the server's host key against known_hosts decided.
struct HostKeyVerdict {
  enum class Kind {
    trusted,   // known_hosts has this key for this host
    recorded,  // unknown host, key accepted and appended to known_hosts (accept_new)
    unknown,   // unknown host, refused
    changed,   // known_hosts has a DIFFERENT key (or key type) for this host: refused, always
    error,     // could not read the key or the file
  };
  Kind kind = Kind::error;
  std::string fingerprint;  // "SHA256:base64", as `ssh-keygen -l` prints it
  std::string key_type;     // "ssh-ed25519", ...
  std::string message;      // for refusals and errors: why, and what the operator can do
  bool ok() const { return kind == Kind::trusted || kind == Kind::recorded; }
};

enum class UnknownHost { refuse, accept_new };

struct ExecResult {
  int exit_status = -1;
  std::string out;
  std::string err;
};

class Session {
 public:
  // TCP connect and SSH key exchange; no trust decision yet. `known_hosts` is given here because
  // the key exchange already prefers the host key types recorded there, as OpenSSH does.
  static Result<std::unique_ptr<Session>> open(const Target& target, const std::filesystem::path& known_hosts,
                                               std::chrono::seconds timeout);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Only `known_hosts` is consulted (not /etc/ssh/ssh_known_hosts): the trust an enrolment relies
  // on sits in one file the operator names. A missing file counts as empty.
  HostKeyVerdict verify_host_key(UnknownHost policy);

  // Public-key authentication: with `identity` only that private key (unencrypted; an encrypted
  // key belongs in ssh-agent), otherwise the keys of the running ssh-agent (SSH_AUTH_SOCK).
  Status authenticate(const std::filesystem::path& identity);

  // Runs `command` through the remote user's shell; stdout and stderr are collected. A non-zero
  // exit status is a result, not an error; an error means the command's outcome is unknown.
  Result<ExecResult> exec(const std::string& command, std::chrono::milliseconds timeout);

  // Writes `data` to `remote_path` over SFTP, created with `mode` (and chmod-ed to exactly it):
  // an existing file is removed first, so a key never inherits a looser mode.
  Status upload(std::string_view data, const std::string& remote_path, unsigned mode);

  // mkdir -p over SFTP: every missing component of `path` is made with `mode`; existing
  // directories are left as they are.
  Status make_dirs(const std::string& path, unsigned mode);
  Status chmod(const std::string& path, unsigned mode);

  const Target& target() const { return target_; }
  std::string where() const;  // "user@host:port", for messages

  struct Impl;

 private:
  Session(Target target, std::unique_ptr<Impl> impl);
  Target target_;
  std::unique_ptr<Impl> impl_;
};

// Quotes one word for a POSIX shell: 'it'\''s' style, safe for any bytes but NUL.
std::string shell_quote(std::string_view word);

}  // namespace tandem::ssh
