// Session::upload: SFTP writes in 64 KiB requests; fsync on the remote where the server offers
// it, so a file that hashes right also survives the node losing power right after.
#include <fcntl.h>

#include "session_impl.hpp"

namespace tandem::ssh {
namespace {

std::string sftp_reason(sftp_session sftp, ssh_session s) {
  switch (sftp_get_error(sftp)) {
    case SSH_FX_NO_SUCH_FILE: return "no such file or directory";
    case SSH_FX_PERMISSION_DENIED: return "permission denied";
    case SSH_FX_FAILURE: return std::string("failure (disk full, or not a directory?): ") + ssh_get_error(s);
    case SSH_FX_FILE_ALREADY_EXISTS: return "the file already exists";
    default: return ssh_get_error(s);
  }
}

constexpr std::size_t kChunk = 64 * 1024;

// The SFTP channel, opened on first use and kept for the session's later transfers.
Result<sftp_session> sftp_of(Session::Impl& impl, const std::string& where) {
  if (!impl.sftp) {
    impl.sftp = sftp_new(impl.session);
    if (!impl.sftp || sftp_init(impl.sftp) != SSH_OK) {
      if (impl.sftp) sftp_free(impl.sftp);
      impl.sftp = nullptr;
      return Error{where + ": cannot start SFTP (does the server offer the sftp subsystem?): " + impl.last_error()};
    }
  }
  return impl.sftp;
}

}  // namespace

Status Session::make_dirs(const std::string& path, unsigned mode) {
  auto s = sftp_of(*impl_, where());
  if (!s) return s.error();
  sftp_session sftp = s.value();
  std::size_t pos = 1;
  while (pos <= path.size()) {
    std::size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    pos = next + 1;
    if (prefix.empty() || prefix.back() == '/') continue;
    if (sftp_attributes a = sftp_stat(sftp, prefix.c_str())) {
      const bool dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
      sftp_attributes_free(a);
      if (dir) continue;
      return Error{"cannot make directory " + path + ": " + prefix + " exists and is not a directory"};
    }
    if (sftp_mkdir(sftp, prefix.c_str(), static_cast<mode_t>(mode)) != 0)
      return Error{"cannot make directory " + prefix + ": " + sftp_reason(sftp, impl_->session)};
  }
  return {};
}

Status Session::chmod(const std::string& path, unsigned mode) {
  auto s = sftp_of(*impl_, where());
  if (!s) return s.error();
  if (sftp_chmod(s.value(), path.c_str(), static_cast<mode_t>(mode)) != 0)
    return Error{"chmod " + path + " failed: " + sftp_reason(s.value(), impl_->session)};
  return {};
}

Status Session::upload(std::string_view data, const std::string& path, unsigned mode) {
  Impl& impl = *impl_;
  auto s = sftp_of(impl, where());
  if (!s) return s.error();
  sftp_session sftp = s.value();
  sftp_unlink(sftp, path.c_str());  // absent is fine; a leftover must not lend us its mode or owner
  sftp_file f = sftp_open(sftp, path.c_str(), O_WRONLY | O_CREAT | O_EXCL, static_cast<mode_t>(mode));
  if (!f) return Error{"cannot create " + path + ": " + sftp_reason(sftp, impl.session)};
  std::size_t off = 0;
  while (off < data.size()) {
    const std::size_t len = std::min(kChunk, data.size() - off);
    const ssize_t n = sftp_write(f, data.data() + off, len);
    if (n <= 0) {
      std::string why = sftp_reason(sftp, impl.session);
      sftp_close(f);
      return Error{"writing " + path + " failed: " + why};
    }
    off += static_cast<std::size_t>(n);
  }
  if (sftp_extension_supported(sftp, "fsync@openssh.com", "1") && sftp_fsync(f) != 0) {
    std::string why = sftp_reason(sftp, impl.session);
    sftp_close(f);
    return Error{"fsync of " + path + " failed: " + why};
  }
  if (sftp_close(f) != SSH_OK) return Error{"closing " + path + " failed: " + sftp_reason(sftp, impl.session)};
  // The server's umask may have narrowed the mode at creation; set it exactly.
  if (sftp_chmod(sftp, path.c_str(), static_cast<mode_t>(mode)) != 0)
    return Error{"chmod " + path + " failed: " + sftp_reason(sftp, impl.session)};
  return {};
}

}  // namespace tandem::ssh
