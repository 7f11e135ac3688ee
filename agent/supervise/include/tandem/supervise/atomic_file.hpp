// Small state files that must survive a crash or power cut whole: either the old or the new
// contents, never a torn mix (temp file + fsync + rename + directory fsync).
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem::supervise {

// Replace `path` with `content` atomically and durably; the file gets `mode`.
Status write_file_atomic(const std::string& path, std::string_view content, mode_t mode = 0640);

// The whole file, or nullopt when it does not exist (any other failure is an error).
Result<std::optional<std::string>> read_file_if_exists(const std::string& path);

// Remove a file and fsync its directory; a missing file is not an error.
Status remove_file_durably(const std::string& path);

// mkdir -p with `mode` for the directories it creates.
Status make_dirs(const std::string& path, mode_t mode = 0750);

}  // namespace tandem::supervise
