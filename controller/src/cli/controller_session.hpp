// What the verbs that talk to agents share: where the controller keeps its state and finds its
// certificates, the manifest's exact text (sent to the agents) and digest, a client per node,
// the journal of this bind name, and (for verbs that change the cluster) the state lock.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "bind/agent_client.hpp"
#include "bind/bind_journal.hpp"
#include "bind/progress_display.hpp"
#include "cli_common.hpp"
#include "bind/stage_push.hpp"
#include "bind/state_lock.hpp"
#include "tandem/sha256.hpp"

namespace tandem::ctl {

struct ControllerDirs {
  std::string state_dir;  // journal, lock, reports
  std::string pki_dir;    // ca.pem, controller.pem/.key
  std::string stage_root = "/";  // stage.from: controller: host paths resolve under this prefix here
};

// --state-dir and --pki-dir (also $TANDEM_STATE_DIR, $TANDEM_PKI_DIR), with their defaults.
void add_controller_options(CLI::App* cmd, ControllerDirs& dirs);
std::string default_state_dir();

struct Session {
  Manifest m;
  std::string yaml;    // the manifest's text, byte for byte
  std::string sha256;  // of `yaml`
  std::string bind_dir;
  std::optional<StateLock> lock;
  std::unique_ptr<BindJournal> journal;
  std::map<std::string, AgentClient> agents;
};

// Loads the manifest (exits 1 with file:line:col errors if it is wrong), then the rest. With
// `lock_verb`, takes the state lock first (a second bind while one runs is refused here).
// --stage-root (also $TANDEM_STAGE_ROOT), for the verbs that stage (bind, stage).
void add_stage_root_option(CLI::App* cmd, ControllerDirs& dirs);
// The pushers' side of stage.from: controller (null for any other source), its hash cache in the
// bind's state dir.
Result<std::shared_ptr<StagePush>> open_stage_push(const Session& s, const ControllerDirs& dirs);

Result<Session> open_session(const cli::ManifestArg& arg, const ControllerDirs& dirs, const char* lock_verb);

// The progress display of a verb over the session's nodes (rows in start order, then a
// "controller" row where the verb has steps of its own), on stdout, or on stderr under --output
// json; `total`: the steps to come.
std::unique_ptr<Progress> session_progress(const Session& s, bool as_json, bool controller_row, int total);

using tandem::sha256_hex;  // common/include/tandem/sha256.hpp

}  // namespace tandem::ctl
