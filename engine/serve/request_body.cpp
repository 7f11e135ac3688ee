#include "request_body.hpp"

namespace tandem::engine::serve {
namespace {

// nlohmann's message without its "[json.exception...] " tag and without the "; last read: '...'"
// quote of the input: those bytes need not be UTF-8, and the error is answered as JSON, whose
// dump() throws on invalid UTF-8. What remains is ASCII by construction; anything else becomes '?'.
std::string reason(const nlohmann::json::exception& e) {
  std::string w = e.what();
  if (const auto cut = w.find("; last read: "); cut != std::string::npos) w.erase(cut);
  if (w.rfind("[json.exception.", 0) == 0)
    if (const auto tag_end = w.find("] "); tag_end != std::string::npos) w.erase(0, tag_end + 2);
  for (auto& c : w)
    if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  return w;
}

}  // namespace

std::optional<nlohmann::json> parse_body(const std::string& body, api::ApiError& error) {
  error.status = 400;
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    error.message = "the request body is not valid JSON (byte " + std::to_string(e.byte) + "): " + reason(e);
  } catch (const nlohmann::json::exception& e) {  // out_of_range.406: a number past double's range (1e999)
    error.message = "the request body is not usable JSON: " + reason(e);
  }
  return std::nullopt;
}

}  // namespace tandem::engine::serve
