// The model layer uses the project's Result (common/include/tandem/result.hpp); its errors say
// what failed and where (file, tensor, field), ready to show to an operator as they are.
#pragma once
#include <string>
#include <utility>

#include "tandem/result.hpp"

namespace tandem::model {

using tandem::Error;
using tandem::Ok;
using tandem::Result;
using Status = Result<Ok>;

inline Error error(std::string message) { return Error{std::move(message)}; }

}  // namespace tandem::model
