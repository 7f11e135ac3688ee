#include <cerrno>
#include <cstring>

#include "tandem/supervise/result.hpp"

namespace tandem::supervise {

Error Error::context(std::string_view what) const {
  return Error{std::string(what) + ": " + message, sys_errno};
}

Error sys_error(std::string_view what, int err) {
  return Error{std::string(what) + ": " + std::strerror(err), err};
}

Error sys_error(std::string_view what) { return sys_error(what, errno); }

}  // namespace tandem::supervise
