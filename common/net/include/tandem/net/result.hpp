// common/net uses the project's Result (common/include/tandem/result.hpp).
#pragma once
#include "tandem/result.hpp"

namespace tandem::net {
using tandem::Error;
using tandem::Result;
using tandem::Status;
}  // namespace tandem::net
