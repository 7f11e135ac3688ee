// Enrols one node: connect (strict host key), authenticate, prepare, copy, verify SHA-256 on the
// node, install, start the agent, and wait until it answers GET /v1/health over mutual TLS.
// Each step is named, so a failure says node, step and why.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "enroll_plan.hpp"
#include "ssh/session.hpp"
#include "tandem/net/http_client.hpp"

namespace tandem::enroll {

struct RunOptions {
  std::filesystem::path known_hosts;
  ssh::UnknownHost unknown_host = ssh::UnknownHost::refuse;
  std::filesystem::path identity;  // empty: ssh-agent
  std::chrono::seconds ssh_timeout{10};
  std::chrono::seconds health_timeout{30};
  const net::HttpsClient* client = nullptr;  // the controller's mTLS client
};

struct FileReport {
  std::string label;
  std::string remote;
  unsigned mode = 0;
  std::size_t bytes = 0;
  std::string sha256;         // what was sent
  std::string remote_sha256;  // what sha256sum on the node said
};

struct NodeReport {
  std::string node;
  std::string ssh;  // user@host:port
  bool ok = false;
  std::string host_key;  // "ssh-ed25519 SHA256:..."
  bool host_key_recorded = false;
  bool host_key_changed = false;  // the caller stops every remaining node
  std::vector<FileReport> files;
  std::vector<std::pair<std::string, double>> step_ms;
  std::string agent_version;
  std::string failed_step;
  std::string error;
};

// step, detail: "copy", "agent binary -> /usr/local/sbin/tandemd (11 MB)". Never key material.
using Progress = std::function<void(const std::string& step, const std::string& detail)>;

NodeReport enroll_node(const NodePlan& plan, const RunOptions& o, const Progress& progress);

}  // namespace tandem::enroll
