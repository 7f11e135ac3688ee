// Finding and commenting out cron lines: pure text functions (tested on CRLF and missing final
// newlines) plus the list of crontab files on a node.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "tandem/agent/error.hpp"
#include "tandem/agent/node_root.hpp"

namespace tandem::agent {

struct CronMatch {
  std::size_t line = 0;  // 1-based
  std::string text;      // the line without its line ending
  std::string pattern;   // the first manifest pattern it contains
};

// Marker put in front of a disabled line; the op id says who did it and which undo restores it.
std::string cron_marker(const std::string& op_id);  // "#tandem-disabled op=<id># "

// Non-comment, non-blank lines containing any pattern (substring). "\r" before "\n" is kept out
// of the match text but never out of the file.
std::vector<CronMatch> find_cron_matches(const std::string& content, const std::vector<std::string>& patterns);

// `content` with the given lines prefixed by the marker; every other byte unchanged.
std::string disable_cron_lines(const std::string& content, const std::vector<CronMatch>& matches, const std::string& op_id);

// Crontab host paths that exist: /etc/crontab, /etc/cron.d/*, /var/spool/cron/crontabs/*
// (dot-files skipped: cron ignores them and our temp files are dot-files). Entries that cannot
// be resolved inside the root (escaping symlinks) go to `refused`.
std::vector<std::string> list_cron_files(const NodeRoot& root, std::vector<Error>& refused);

}  // namespace tandem::agent
