#include "tandem/agent/error.hpp"

#include <cerrno>
#include <cstring>

namespace tandem::agent {

Error sys_error(std::string file, std::string what) { return sys_error(std::move(file), std::move(what), errno); }

Error sys_error(std::string file, std::string what, int err) {
  Error e = tandem::sys_error(what, err);
  e.where = std::move(file);
  return e;
}

Error plain_error(std::string file, std::string what) { return error_at(std::move(file), std::move(what)); }

void set_evidence(Error& e, const nlohmann::json& evidence) { e.evidence = evidence.is_null() ? "" : evidence.dump(); }

nlohmann::json evidence(const Error& e) {
  if (e.evidence.empty()) return nullptr;
  // Written by set_evidence or read from our own journal; text that does not parse is kept as text.
  auto j = nlohmann::json::parse(e.evidence, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json(e.evidence) : j;
}

nlohmann::json to_json(const Error& e) {
  nlohmann::json j{{"file", e.where}, {"what", e.message}, {"message", e.text()}};
  if (e.sys_errno != 0) {
    j["errno"] = e.sys_errno;
    j["errno_text"] = std::strerror(e.sys_errno);
  }
  if (!e.evidence.empty()) j["evidence"] = evidence(e);
  if (e.cause) j["cause"] = to_json(*e.cause);
  return j;
}

Error error_from_json(const nlohmann::json& j) {
  Error e = error_at(j.value("file", ""), j.value("what", ""));
  e.sys_errno = j.value("errno", 0);
  if (j.contains("evidence")) set_evidence(e, j["evidence"]);
  if (j.contains("cause") && j["cause"].is_object()) e.cause = std::make_shared<const Error>(error_from_json(j["cause"]));
  return e;
}

}  // namespace tandem::agent
