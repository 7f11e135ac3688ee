// The last lines of a (possibly huge) engine log, read backwards from the end.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::supervise {

// At most `lines` lines, reading at most `max_bytes` from the end. A missing file is an error.
Result<std::vector<std::string>> tail_lines(const std::string& path, std::size_t lines,
                                            std::size_t max_bytes = 1 << 20);

}  // namespace tandem::supervise
