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

}  // namespace

Status Session::upload(std::string_view data, const std::string& path, unsigned mode) {
  Impl& impl = *impl_;
  if (!impl.sftp) {
    impl.sftp = sftp_new(impl.session);
    if (!impl.sftp || sftp_init(impl.sftp) != SSH_OK)
      return Error{where() + ": cannot start SFTP (does the server offer the sftp subsystem?): " + impl.last_error()};
  }
  sftp_session sftp = impl.sftp;
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
