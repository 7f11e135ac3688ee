#include "tandem/net/http_message.hpp"

#include <cctype>

namespace tandem::net {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
               hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

std::string percent_encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<nlohmann::json> Request::json() const {
  if (body.empty()) return Error{"request body is empty; expected JSON"};
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() starts with "[json.exception.parse_error.101] "; the rest names line and column.
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    // The tail quotes the raw bytes read, which may be the invalid UTF-8 that failed.
    if (const auto pos = what.find("; last read"); pos != std::string::npos) what.erase(pos);
    return Error{"malformed JSON body (byte " + std::to_string(e.byte) + "): " + what};
  } catch (const nlohmann::json::exception& e) {
    // out_of_range.406: a number no double holds ("timeout_s": 1e999).
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    return Error{"unreadable JSON body: " + what};
  }
}

std::optional<std::string> Request::query_param(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    const auto eq = pair.find('=');
    if (percent_decode(pair.substr(0, eq)) != name) continue;
    return eq == std::string_view::npos ? std::string{} : percent_decode(pair.substr(eq + 1));
  }
  return std::nullopt;
}

Response Response::error(unsigned status, std::string message) {
  return Response{status, nlohmann::json{{"error", std::move(message)}}};
}

}  // namespace tandem::net
