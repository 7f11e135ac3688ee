#include "tandem/url.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>

#include "tandem/names.hpp"

namespace tandem {
namespace {

std::string at_position(size_t i) { return " at position " + std::to_string(i + 1); }

// Spaces, control characters and raw non-ASCII bytes are never part of a URL: they are where a
// hostile or mistyped URL hides a second request line or a different host.
std::optional<std::string> bad_byte(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == ' ') return "a space" + at_position(i) + " (a space in a URL is written %20)";
    if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(c));
      return std::string("a control character (") + hex + ")" + at_position(i);
    }
    if (c >= 0x80) return "a non-ASCII byte" + at_position(i) + " (it must be percent-encoded, %XX)";
  }
  return std::nullopt;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// RFC 3986 pchar plus '/' and '?': unreserved, sub-delims, ':' and '@'.
bool is_path_char(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("-._~!$&'()*+,;=:@/?").find(c) != std::string_view::npos;
}

// Path, query and fragment: only characters that need no encoding, and well-formed %XX escapes.
std::optional<std::string> bad_path(std::string_view rest, size_t offset) {
  for (size_t i = 0; i < rest.size(); ++i) {
    char c = rest[i];
    if (c == '%') {
      if (i + 2 >= rest.size() || !is_hex(rest[i + 1]) || !is_hex(rest[i + 2]))
        return "a '%'" + at_position(offset + i) + " not followed by two hex digits";
      i += 2;
    } else if (c == '#') {
      // The fragment may hold the same characters (and no second '#').
      if (rest.find('#', i + 1) != std::string_view::npos)
        return "a second '#'" + at_position(offset + rest.find('#', i + 1));
    } else if (!is_path_char(c)) {
      return std::string("'") + c + "'" + at_position(offset + i) + ", which must be percent-encoded";
    }
  }
  return std::nullopt;
}

Result<std::uint16_t> read_port(std::string_view digits) {
  if (digits.empty()) return Error{"no port after ':'"};
  const bool numeric = std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!numeric || digits.size() > 5) return Error{"port '" + std::string(digits) + "' is not 1 to 65535"};
  int v = 0;
  for (char c : digits) v = v * 10 + (c - '0');
  if (v < 1 || v > 65535) return Error{"port '" + std::string(digits) + "' is not 1 to 65535"};
  return static_cast<std::uint16_t>(v);
}

Status check_host(std::string_view host) {
  if (host.empty()) return Error{"no host"};
  const bool dotted = std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
  if (dotted) {
    in_addr ignored{};
    if (inet_pton(AF_INET, std::string(host).c_str(), &ignored) != 1)
      return Error{"host '" + std::string(host) + "' is not a valid IPv4 address"};
    return {};
  }
  if (!is_hostname(host))
    return Error{"host '" + std::string(host) +
                 "' is not a host name (letters, digits, '-' and '.', labels of 1 to 63 characters), an IPv4 "
                 "address or an IPv6 address in brackets like [::1]"};
  return {};
}

// HOST[:PORT] or [IPv6][:PORT] into `u`.
Status read_authority(std::string_view auth, HttpUrl& u) {
  if (auth.find('@') != std::string_view::npos)
    return Error{"user information before '@' (credentials are not taken in these URLs)"};
  std::string_view port;
  bool has_port = false;
  if (!auth.empty() && auth.front() == '[') {
    const size_t close = auth.find(']');
    if (close == std::string_view::npos) return Error{"an unclosed '[' in the host (an IPv6 host is written like [::1])"};
    const std::string inner(auth.substr(1, close - 1));
    in6_addr ignored{};
    if (inet_pton(AF_INET6, inner.c_str(), &ignored) != 1)
      return Error{"host '[" + inner + "]' is not a valid IPv6 address"};
    u.host = inner;
    u.ipv6 = true;
    std::string_view after = auth.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Error{"'" + std::string(after) + "' after ']' where ':PORT' or the path belongs"};
      port = after.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = auth.find(':');
    if (auto s = check_host(auth.substr(0, colon)); !s) return s.error();
    u.host = std::string(auth.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = auth.substr(colon + 1);
      has_port = true;
    }
  }
  if (has_port) {
    auto p = read_port(port);
    if (!p) return p.error();
    u.port = *p;
  }
  return {};
}

}  // namespace

std::string bracketed_host(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return std::string(host);
  return "[" + std::string(host) + "]";
}

std::string host_port(std::string_view host, std::uint16_t port) {
  return bracketed_host(host) + ":" + std::to_string(port);
}

std::string http_base_url(std::string_view host, std::uint16_t port) { return "http://" + host_port(host, port); }

std::string HttpUrl::authority() const {
  std::string out = bracketed_host(host);
  if (port) out += ":" + std::to_string(*port);
  return out;
}

Result<HttpUrl> parse_http_url(std::string_view text) {
  if (text.empty()) return Error{"empty"};
  if (auto why = bad_byte(text)) return Error{*why};
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos) return Error{"not a URL (no scheme://)"};
  HttpUrl u;
  u.scheme = std::string(text.substr(0, sep));
  std::transform(u.scheme.begin(), u.scheme.end(), u.scheme.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  if (u.scheme != "http" && u.scheme != "https")
    return Error{"scheme '" + std::string(text.substr(0, sep)) + "' is not http or https"};
  const size_t auth_start = sep + 3;
  const size_t auth_end = std::min(text.find_first_of("/?#", auth_start), text.size());
  if (auto s = read_authority(text.substr(auth_start, auth_end - auth_start), u); !s) return s.error();
  const std::string_view rest = text.substr(auth_end);
  if (auto why = bad_path(rest, auth_end)) return Error{*why};
  std::string_view target = rest.substr(0, rest.find('#'));
  u.target = target.empty() || target.front() != '/' ? "/" + std::string(target) : std::string(target);
  return u;
}

}  // namespace tandem
