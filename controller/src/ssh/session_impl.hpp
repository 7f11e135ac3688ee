// The libssh handles behind a Session; shared by session.cpp, exec.cpp and upload.cpp only.
#pragma once
#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <filesystem>
#include <string>

#include "session.hpp"

namespace tandem::ssh {

struct Session::Impl {
  ssh_session session = nullptr;
  sftp_session sftp = nullptr;  // opened on the first upload
  std::filesystem::path known_hosts;

  ~Impl() {
    if (sftp) sftp_free(sftp);
    if (session) {
      if (ssh_is_connected(session)) ssh_disconnect(session);
      ssh_free(session);
    }
  }
  std::string last_error() const { return ssh_get_error(session); }
};

}  // namespace tandem::ssh
