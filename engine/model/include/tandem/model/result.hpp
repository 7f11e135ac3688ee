// The model layer fails with the project's Error and Result (common/include/tandem/result.hpp);
// its errors say what failed and where (file, tensor, field), ready to show to an operator as they are.
#pragma once
#include <string>
#include <utility>

#include "tandem/result.hpp"

namespace tandem::model {

inline Error error(std::string message) { return Error{std::move(message)}; }

}  // namespace tandem::model
