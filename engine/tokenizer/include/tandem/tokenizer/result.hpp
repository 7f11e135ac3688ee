// The tokenizer uses the project's Result (common/include/tandem/result.hpp): a failed load says
// which file, which key and what was expected.
#pragma once
#include "tandem/result.hpp"

namespace tandem::tokenizer {
using tandem::Error;
using tandem::Result;
}  // namespace tandem::tokenizer
