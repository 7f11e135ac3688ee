#include "tandem/agent/error.hpp"

#include <cerrno>
#include <cstring>

namespace tandem::agent {

std::string Error::message() const {
  std::string m;
  if (!file.empty()) m += file + ": ";
  m += what;
  if (err != 0) m += std::string(": ") + std::strerror(err);
  return m;
}

nlohmann::json Error::to_json() const {
  nlohmann::json j{{"file", file}, {"what", what}, {"message", message()}};
  if (err != 0) {
    j["errno"] = err;
    j["errno_text"] = std::strerror(err);
  }
  if (!evidence.is_null()) j["evidence"] = evidence;
  return j;
}

Error sys_error(std::string file, std::string what) { return sys_error(std::move(file), std::move(what), errno); }

Error sys_error(std::string file, std::string what, int err) {
  return Error{std::move(file), std::move(what), err, nullptr};
}

Error plain_error(std::string file, std::string what) { return Error{std::move(file), std::move(what), 0, nullptr}; }

}  // namespace tandem::agent
