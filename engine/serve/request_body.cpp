#include "request_body.hpp"

#include <cstdio>
#include <string_view>

namespace tandem::engine::serve {
namespace {

// nlohmann's messages end in "; last read: '<the raw bytes>'", which may be the very bytes that are
// not UTF-8; the position is what a client needs, so that tail is dropped.
std::string without_raw_bytes(std::string what) {
  if (const auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
  if (const auto pos = what.find("; last read"); pos != std::string::npos) what.erase(pos);
  return what;
}

// Serialising, copying and rendering JSON recurse per level, so a body of 100,000 nested '['
// would end the process on its stack long after parsing succeeded: the depth is bounded first.
// A scan outside strings is enough, since brackets inside strings do not nest.
std::optional<std::size_t> too_deep_at(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<nlohmann::json> parse_body(const std::string& body, api::ApiError& error) {
  error.status = 400;
  error.param.clear();
  if (const auto at = too_deep_at(body, kMaxBodyDepth)) {
    error.message = "the request body nests deeper than " + std::to_string(kMaxBodyDepth) + " levels (at offset " +
                    std::to_string(*at) + ")";
    return std::nullopt;
  }
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string what = e.what();
    // e.byte counts from 1 and points at the last byte read: the offending one.
    const std::size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    if (what.find("ill-formed UTF-8") != std::string::npos || what.find("invalid UTF-8") != std::string::npos) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", offset < body.size() ? static_cast<unsigned char>(body[offset]) : 0u);
      error.message = "the request body is not valid UTF-8: byte " + std::string(hex) + " at offset " +
                      std::to_string(offset) + " (JSON text must be UTF-8)";
    } else {
      error.message = "the request body is not valid JSON: " + without_raw_bytes(what);
    }
  } catch (const nlohmann::json::out_of_range& e) {
    // "number overflow parsing '1e999'": a number no double holds.
    error.message = "the request body has a number out of range: " + without_raw_bytes(e.what());
  } catch (const nlohmann::json::exception& e) {
    error.message = "the request body could not be read: " + without_raw_bytes(e.what());
  }
  return std::nullopt;
}

}  // namespace tandem::engine::serve
