// What `tandemctl enroll` puts on one node and how it starts the agent there: computed from the
// manifest and the local files before any connection is made, so bad input stops early.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/manifest.hpp"
#include "tandem/result.hpp"
#include "tandem/sha256.hpp"

namespace tandem::enroll {

enum class StartMode { systemd, direct };

struct Options {
  std::filesystem::path pki_dir;       // from `tandemctl pki init`
  std::filesystem::path agent_binary;  // the tandemd to install
  StartMode start = StartMode::systemd;
};

// One file to install. `content` is what is sent and hashed: the remote file must hash the same.
struct InstallFile {
  std::string label;   // "agent binary", "node key", ... for progress and errors
  std::string remote;  // final path on the node (root prefix applied)
  unsigned mode = 0644;
  std::string content;
  std::string sha256;  // of content, lowercase hex
  std::string staged() const { return remote + ".tandem-new"; }
};

// Where things live on a node, as the node sees them (before the root prefix). The unit's
// ExecStart names the same paths (deploy/systemd/tandemd.service).
inline constexpr const char* kBinaryPath = "/usr/local/sbin/tandemd";
inline constexpr const char* kPkiDir = "/etc/tandem/pki";
inline constexpr const char* kEnvPath = "/etc/tandem/tandemd.env";
inline constexpr const char* kUnitPath = "/etc/systemd/system/tandemd.service";
inline constexpr const char* kStateDir = "/var/lib/tandem";
inline constexpr const char* kDirectLog = "/var/log/tandemd.log";          // --start direct only
inline constexpr const char* kDirectPid = "/var/lib/tandem/tandemd.pid";   // --start direct only

struct NodePlan {
  const Node* node = nullptr;
  std::vector<InstallFile> files;
  std::vector<std::string> allow_exec;  // --allow-exec values for this node
  std::string listen;                   // ADDRESS:PORT the agent listens on
  std::vector<std::string> dirs;        // made over SFTP before the copy (0755)
  std::string private_dir;              // the agent's state directory (0700)
  std::string tools;                    // what the node must have for verify and start
  std::string install_command;          // moves verified staged files into place
  std::string start_command;            // (re)starts the agent
  std::string log_command;              // the agent's recent log, for errors
  std::string at(const std::string& path) const;  // path under the node's root
};

// The node's path under its root ("/" leaves it as is).
std::string under_root(const std::string& root, const std::string& path);

// Reads the local files (binary, CA, node certificate and key) and renders the env file and unit.
// Errors name the file and what to do ("run `tandemctl pki init DIR` first").
Result<NodePlan> plan_node(const Manifest& m, const Node& node, const Options& o);

// The env file tandemd.service reads, for this node.
std::string render_env(const Manifest& m, const Node& node, const std::vector<std::string>& allow_exec,
                       const std::string& listen);

// The executables this node's agent must allow: the engine binary and the first word of every stop
// and rollback command the manifest runs on this node.
std::vector<std::string> allow_exec_for(const Manifest& m, const Node& node);

using tandem::sha256_hex;  // common/include/tandem/sha256.hpp

// deploy/systemd/tandemd.service, compiled in.
const char* embedded_tandemd_unit();

}  // namespace tandem::enroll
