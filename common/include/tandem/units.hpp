// Human quantities in manifests: sizes ("115GiB", "3221225472") and durations ("70m", "1h30m").
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {

using Duration = std::chrono::milliseconds;

struct ParseError {
  std::string what;  // why the text is not a size/duration
};

// Bytes from "3221225472", "3GiB", "1.5TiB", "500MB" (KB/MB/GB/TB are powers of 1000,
// KiB/MiB/GiB/TiB powers of 1024, "B" optional). Negative or overflowing values are errors.
std::optional<std::uint64_t> parse_size(std::string_view text, ParseError* err = nullptr);

// Milliseconds from "500ms", "30s", "70m", "2h", "1h30m", "1d". A unit is required: a bare
// number is ambiguous between seconds and minutes, and a dead-man delay must not be.
std::optional<Duration> parse_duration(std::string_view text, ParseError* err = nullptr);

std::string format_size(std::uint64_t bytes);     // "115 GiB", "3 GiB", "512 B"
std::string format_duration(Duration d);          // "1h10m", "45s", "250ms"

}  // namespace tandem
