// PEM files on disk: atomic, durable writes with the right mode from the first byte.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "openssl_util.hpp"
#include "tandem/net/pki.hpp"

namespace fs = std::filesystem;

namespace tandem::net {
namespace {

Error sys_error(const fs::path& path, const std::string& what, int err) {
  return Error{path.string() + ": " + what + ": " + std::strerror(err)};
}

Status write_all(int fd, std::string_view content, const fs::path& tmp) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(tmp, "write", errno);
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd) != 0) return sys_error(tmp, "fsync", errno);
  return {};
}

// The rename is only durable once the directory entry is on disk too.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

Result<std::string> read_small_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return sys_error(path, "cannot open", errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error{path.string() + ": read failed"};
  return text.str();
}

}  // namespace

Status write_file_atomic(const fs::path& path, std::string_view content, unsigned mode,
                         Overwrite overwrite) {
  if (overwrite == Overwrite::no && fs::exists(path))
    return Error{path.string() + ": already exists; refusing to overwrite it"};
  std::string tmp_name = path.string() + ".tmp.XXXXXX";
  // mkstemp creates the file 0600, so a key is never readable by others, not even briefly.
  const int fd = ::mkstemp(tmp_name.data());
  if (fd < 0) return sys_error(path, "creating a temporary file", errno);
  const fs::path tmp = tmp_name;
  Status written = write_all(fd, content, tmp);
  if (written && ::fchmod(fd, static_cast<mode_t>(mode)) != 0)
    written = sys_error(tmp, "chmod", errno);
  ::close(fd);
  if (written) {
    // link() fails if the target appeared meanwhile, so "no overwrite" holds even under a race.
    const int rc = overwrite == Overwrite::yes ? ::rename(tmp.c_str(), path.c_str())
                                               : ::link(tmp.c_str(), path.c_str());
    if (rc != 0) written = sys_error(path, overwrite == Overwrite::yes ? "rename" : "link", errno);
  }
  if (!written || overwrite == Overwrite::no) ::unlink(tmp.c_str());
  if (written) fsync_dir(path.parent_path());
  return written;
}

Status write_credential(const Credential& cred, const fs::path& cert_path,
                        const fs::path& key_path, Overwrite overwrite) {
  // Key first: a certificate without its key on disk is useless, the reverse is merely incomplete.
  if (Status s = write_file_atomic(key_path, cred.key_pem, 0600, overwrite); !s) return s;
  return write_file_atomic(cert_path, cred.cert_pem, 0644, overwrite);
}

Result<Credential> read_credential(const fs::path& cert_path, const fs::path& key_path) {
  auto cert_pem = read_small_file(cert_path);
  if (!cert_pem) return cert_pem.error();
  auto key_pem = read_small_file(key_path);
  if (!key_pem) return key_pem.error();
  auto cert = ossl::parse_cert(*cert_pem);
  if (!cert) return cert.error().with_context(cert_path.string());
  auto key = ossl::parse_key(*key_pem);
  if (!key) return key.error().with_context(key_path.string());
  if (X509_check_private_key(cert->get(), key->get()) != 1)
    return ossl::error(key_path.string() + ": key does not belong to " + cert_path.string());
  return Credential{std::move(*cert_pem), std::move(*key_pem)};
}

Result<CertInfo> inspect_certificate_file(const fs::path& cert_path) {
  auto pem = read_small_file(cert_path);
  if (!pem) return pem.error();
  auto info = inspect_certificate(*pem);
  if (!info) return info.error().with_context(cert_path.string());
  return info;
}

fs::path PkiLayout::node_cert(const std::string& node) const {
  return dir / "nodes" / (node + ".pem");
}

fs::path PkiLayout::node_key(const std::string& node) const {
  return dir / "nodes" / (node + ".key");
}

}  // namespace tandem::net
