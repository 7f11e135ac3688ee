#include "session.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "session_impl.hpp"

namespace tandem::ssh {
namespace {

std::string known_hosts_name(const Target& t) {
  return t.port == 22 ? t.host : "[" + t.host + "]:" + std::to_string(t.port);
}

// Appends one known_hosts line, creating the file (0644; its directory 0700) if needed.
Status append_known_host(const std::filesystem::path& file, std::string line) {
  std::error_code ec;
  if (file.has_parent_path() && !std::filesystem::exists(file.parent_path(), ec)) {
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) return Error{"cannot create " + file.parent_path().string() + ": " + ec.message()};
    std::filesystem::permissions(file.parent_path(), std::filesystem::perms::owner_all, ec);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  int fd = ::open(file.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"cannot open " + file.string() + " to record the host key: " + std::strerror(errno)};
  // A file whose last line lacks its newline would glue our entry onto it.
  std::string text;
  off_t size = ::lseek(fd, 0, SEEK_END);
  char last = '\n';
  if (size > 0 && ::pread(fd, &last, 1, size - 1) != 1) last = '\n';
  if (last != '\n') text += '\n';
  text += line + '\n';
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Error{"cannot record the host key in " + file.string() + ": " + std::strerror(err)};
  return {};
}

}  // namespace

Session::Session(Target target, std::unique_ptr<Impl> impl) : target_(std::move(target)), impl_(std::move(impl)) {}
Session::~Session() = default;

std::string Session::where() const { return target_.user + "@" + target_.host + ":" + std::to_string(target_.port); }

Result<std::unique_ptr<Session>> Session::open(const Target& target, const std::filesystem::path& known_hosts,
                                               std::chrono::seconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->known_hosts = known_hosts;
  impl->session = ssh_new();
  if (!impl->session) return Error{"libssh could not allocate a session"};
  ssh_session s = impl->session;
  const std::string where = target.user + "@" + target.host + ":" + std::to_string(target.port);
  unsigned int port = static_cast<unsigned int>(target.port);
  long secs = static_cast<long>(timeout.count());
  bool process_config = false;  // ~/.ssh/config must not redirect or re-key what the manifest names
  int nodelay = 1;              // SFTP and exec are request/response: Nagle + delayed ACK cost 40 ms each
  if (ssh_options_set(s, SSH_OPTIONS_PROCESS_CONFIG, &process_config) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_HOST, target.host.c_str()) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_PORT, &port) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_USER, target.user.c_str()) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &secs) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_NODELAY, &nodelay) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_KNOWNHOSTS, known_hosts.c_str()) != SSH_OK ||
      ssh_options_set(s, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null") != SSH_OK)
    return Error{where + ": bad SSH options: " + impl->last_error()};
  if (ssh_connect(s) != SSH_OK) return Error{where + ": cannot connect: " + impl->last_error()};
  return std::unique_ptr<Session>(new Session(target, std::move(impl)));
}

HostKeyVerdict Session::verify_host_key(UnknownHost policy) {
  HostKeyVerdict v;
  ssh_session s = impl_->session;
  const std::string file = impl_->known_hosts.string();
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s, &key) != SSH_OK) {
    v.message = "cannot read the server's host key: " + impl_->last_error();
    return v;
  }
  unsigned char* hash = nullptr;
  size_t hash_len = 0;
  const int hrc = ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hash_len);
  if (const char* type = ssh_key_type_to_char(ssh_key_type(key))) v.key_type = type;
  ssh_key_free(key);
  if (hrc != SSH_OK) {
    v.message = "cannot hash the server's host key";
    return v;
  }
  char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hash_len);
  ssh_clean_pubkey_hash(&hash);
  if (fp) {
    v.fingerprint = fp;
    ssh_string_free_char(fp);
  }
  const std::string host = known_hosts_name(target_);
  const std::string shown = v.key_type + " " + v.fingerprint;

  switch (ssh_session_is_known_server(s)) {
    case SSH_KNOWN_HOSTS_OK:
      v.kind = HostKeyVerdict::Kind::trusted;
      return v;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      v.kind = HostKeyVerdict::Kind::changed;
      v.message = "HOST KEY CHANGED: " + host + " now presents " + shown + ", which is not the key " + file +
                  " records for it. Someone may be intercepting the connection, or the node was reinstalled. "
                  "Nothing was sent. If the node was reinstalled, check the new fingerprint on its console "
                  "(ssh-keygen -lf /etc/ssh/ssh_host_" +
                  (v.key_type.rfind("ssh-", 0) == 0 ? v.key_type.substr(4) : std::string("*")) +
                  "_key.pub), remove the old entry with `ssh-keygen -R '" + host + "' -f " + file +
                  "` and enroll again";
      return v;
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      break;
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      v.message = "cannot check the host key against " + file + ": " + impl_->last_error();
      return v;
  }
  if (policy == UnknownHost::refuse) {
    v.kind = HostKeyVerdict::Kind::unknown;
    v.message = "unknown host: " + file + " has no key for " + host + "; it presents " + shown;
    return v;
  }
  char* entry = nullptr;
  if (ssh_session_export_known_hosts_entry(s, &entry) != SSH_OK || !entry) {
    v.message = "cannot format a known_hosts entry: " + impl_->last_error();
    return v;
  }
  std::string line = entry;
  ssh_string_free_char(entry);
  if (auto st = append_known_host(impl_->known_hosts, line); !st) {
    v.message = st.error().message;
    return v;
  }
  v.kind = HostKeyVerdict::Kind::recorded;
  return v;
}

Status Session::authenticate(const std::filesystem::path& identity) {
  ssh_session s = impl_->session;
  int rc = SSH_AUTH_ERROR;
  std::string what;
  if (!identity.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(identity, ec)) return Error{"identity file " + identity.string() + " does not exist"};
    if (::access(identity.c_str(), R_OK) != 0)
      return Error{"cannot read identity file " + identity.string() + ": " + std::strerror(errno)};
    ssh_key key = nullptr;
    // No passphrase callback: enrolment runs unattended, and an encrypted key belongs in ssh-agent.
    if (ssh_pki_import_privkey_file(identity.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK)
      return Error{"cannot load the private key " + identity.string() +
                   " (not a private key, or encrypted: load an encrypted key into ssh-agent and leave out --identity)"};
    rc = ssh_userauth_publickey(s, nullptr, key);
    ssh_key_free(key);
    what = "key " + identity.string();
  } else {
    const char* sock = std::getenv("SSH_AUTH_SOCK");
    if (!sock || !*sock) return Error{"no --identity given and no ssh-agent (SSH_AUTH_SOCK is not set)"};
    rc = ssh_userauth_agent(s, nullptr);
    what = "the keys of ssh-agent";
  }
  switch (rc) {
    case SSH_AUTH_SUCCESS:
      return {};
    case SSH_AUTH_DENIED:
      return Error{where() + " refused " + what + " for user '" + target_.user +
                   "' (is its public key in that user's authorized_keys on the node?)"};
    case SSH_AUTH_PARTIAL:
      return Error{where() + " accepted " + what + " but wants a further factor; enrolment needs key-only login"};
    default:
      return Error{"authentication with " + what + " failed: " + impl_->last_error()};
  }
}

std::string shell_quote(std::string_view word) {
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace tandem::ssh
