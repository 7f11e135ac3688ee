// One reader and one writer of http(s) URLs for the whole project: the manifest checks its URLs with it, and the
// controller's HTTP clients split their URLs with it, so a URL the manifest accepts is one they
// can use, and a URL they would misread never gets past validation.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tandem/result.hpp"

namespace tandem {

struct HttpUrl {
  std::string scheme;  // "http" or "https" (lowercase, whatever the URL's case)
  std::string host;    // a host name, an IPv4 address, or an IPv6 address without its brackets
  bool ipv6 = false;   // host was written as a bracketed IPv6 literal
  std::optional<std::uint16_t> port;  // as written; nullopt: the scheme's default
  std::string target;  // path and query, "/" when the URL has neither; a fragment is dropped

  std::uint16_t port_or_default() const { return port ? *port : scheme == "https" ? 443 : 80; }
  // host[:port] as an HTTP Host header and messages write it ("[::1]:8000", "10.0.0.1").
  std::string authority() const;
};

// The one place that writes a host into a URL or a Host header: an IPv6 address (it has a ':')
// goes in brackets, anything else as it is. "fd00::1", 8000 -> "[fd00::1]:8000".
std::string bracketed_host(std::string_view host);
std::string host_port(std::string_view host, std::uint16_t port);
// "http://HOST:PORT" of a serving port (no path): where gates, bench and probes send requests.
std::string http_base_url(std::string_view host, std::uint16_t port);

// Reads `text` as http://HOST[:PORT][/PATH][?QUERY][#FRAGMENT] (or https://). Refused: any other
// scheme, a missing host, a host that is not a host name, IPv4 or a closed, valid [IPv6] literal,
// user information ("user@"), a port that is not 1..65535, spaces, control and non-ASCII bytes,
// and characters that must be percent-encoded. The error names what is wrong ("no host", "port
// '99999' is not 1 to 65535") without repeating the URL; callers put it in context ("'<url>': ...").
Result<HttpUrl> parse_http_url(std::string_view text);

}  // namespace tandem
