// The shared readers of names and URLs (tandem/names.hpp, tandem/url.hpp): what they accept,
// what they refuse, and what they say about it.
#include <doctest/doctest.h>

#include <string>

#include "tandem/names.hpp"
#include "tandem/url.hpp"

using namespace tandem;

namespace {
// The error of a URL that must be refused ("" if it was accepted, which fails the CHECK).
std::string refusal(const std::string& url) {
  auto u = parse_http_url(url);
  CHECK_MESSAGE(!u.ok(), "accepted: " << url);
  return u ? std::string() : u.error().message;
}
}  // namespace

TEST_CASE("DNS labels: 1 to 63 of a-z 0-9 '-', not starting or ending with '-'") {
  for (const char* good : {"a", "0", "rank0", "glm53-flash-dflash2", "a-b-c", "9lives"}) CHECK_MESSAGE(is_dns_label(good), good);
  CHECK(is_dns_label(std::string(63, 'a')));
  CHECK_FALSE(is_dns_label(std::string(64, 'a')));
  for (const char* bad : {"", "-a", "a-", "-", "A", "Work1", "a.b", "..", ".", "a/b", "../../../../tmp/x", ";$(id)",
                          "a b", "a_b", "x.service", "foo@bar", "a\nb", "\xc3\xa9t\xc3\xa9"})
    CHECK_MESSAGE(!is_dns_label(bad), printable(bad));
  CHECK_FALSE(is_dns_label(std::string("a\0b", 3)));
}

TEST_CASE("host names: labels of either case joined by dots, not all digits") {
  for (const char* good : {"localhost", "example.com", "Example.COM", "a-b.c-d.e", "example.com.", "x1.y2"})
    CHECK_MESSAGE(is_hostname(good), good);
  for (const char* bad : {"", ".", "a..b", ".a", "-a.b", "a-.b", "ex_ample", "exa mple", "1.2.3.4", "999.1.1.1", "a/b"})
    CHECK_MESSAGE(!is_hostname(bad), bad);
  CHECK(is_hostname(std::string(63, 'a') + ".b"));
  CHECK_FALSE(is_hostname(std::string(64, 'a') + ".b"));
}

TEST_CASE("printable escapes what would split or hide a message line") {
  CHECK(printable("plain text: ok") == "plain text: ok");
  CHECK(printable("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(printable(std::string("x\0y\x1b[2J\x7f", 8)) == "x\\x00y\\x1B[2J\\x7F");
  CHECK(printable("caf\xc3\xa9") == "caf\xc3\xa9");  // UTF-8 stays as it is
}

TEST_CASE("good URLs are split into scheme, host, port and target") {
  auto v6 = parse_http_url("http://[::1]:8000/health");
  REQUIRE(v6);
  CHECK(v6->scheme == "http");
  CHECK(v6->host == "::1");
  CHECK(v6->ipv6);
  CHECK(v6->port == 8000);
  CHECK(v6->target == "/health");
  CHECK(v6->authority() == "[::1]:8000");

  auto plain = parse_http_url("http://10.0.0.1:8888/health");
  REQUIRE(plain);
  CHECK(plain->host == "10.0.0.1");
  CHECK(plain->port_or_default() == 8888);
  CHECK(plain->authority() == "10.0.0.1:8888");

  auto https = parse_http_url("HTTPS://Example.com");
  REQUIRE(https);
  CHECK(https->scheme == "https");
  CHECK_FALSE(https->port);
  CHECK(https->port_or_default() == 443);
  CHECK(https->target == "/");

  auto query = parse_http_url("http://localhost/v1/models?x=1&y=%2F#frag");
  REQUIRE(query);
  CHECK(query->port_or_default() == 80);
  CHECK(query->target == "/v1/models?x=1&y=%2F");  // the fragment is never sent

  for (const char* good : {"http://[2001:db8::1]/", "http://[::ffff:10.0.0.1]:1/x", "http://a:65535", "https://a.b.c:1/",
                           "http://lane-a.internal:8000/lane-a/health", "http://h/?q", "http://h/~user/a;b,c=d"})
    CHECK_MESSAGE(parse_http_url(good).ok(), good);
}

TEST_CASE("bad URLs are refused, each with what is wrong") {
  CHECK(refusal("http://[::1") == "an unclosed '[' in the host (an IPv6 host is written like [::1])");
  CHECK(refusal("http://[::1/health") == "an unclosed '[' in the host (an IPv6 host is written like [::1])");
  CHECK(refusal("http://[::g]/") == "host '[::g]' is not a valid IPv6 address");
  CHECK(refusal("http://[10.0.0.1]/") == "host '[10.0.0.1]' is not a valid IPv6 address");
  CHECK(refusal("http://[::1]x/") == "'x' after ']' where ':PORT' or the path belongs");
  CHECK(refusal("http://exa mple/ x") == "a space at position 11 (a space in a URL is written %20)");
  CHECK(refusal("http://:99999999/") == "no host");
  CHECK(refusal("http://") == "no host");
  CHECK(refusal("http:///health") == "no host");
  CHECK(refusal("") == "empty");
  CHECK(refusal("10.0.0.1:8888") == "not a URL (no scheme://)");
  CHECK(refusal("ftp://10.0.0.1/health") == "scheme 'ftp' is not http or https");
  CHECK(refusal("file:///etc/passwd") == "scheme 'file' is not http or https");
  CHECK(refusal("http://x:99999") == "port '99999' is not 1 to 65535");
  CHECK(refusal("http://x:0/") == "port '0' is not 1 to 65535");
  CHECK(refusal("http://x:65536/") == "port '65536' is not 1 to 65535");
  CHECK(refusal("http://x:-1/") == "port '-1' is not 1 to 65535");
  CHECK(refusal("http://x:80:80/") == "port '80:80' is not 1 to 65535");
  CHECK(refusal("http://x:/") == "no port after ':'");
  CHECK(refusal("http://user:pw@x/") == "user information before '@' (credentials are not taken in these URLs)");
  CHECK(refusal("http://ex_ample/").find("host 'ex_ample' is not a host name") == 0);
  CHECK(refusal("http://999.0.0.1/") == "host '999.0.0.1' is not a valid IPv4 address");
  CHECK(refusal("http://1.2.3/") == "host '1.2.3' is not a valid IPv4 address");
  CHECK(refusal("http://h/a\nb") == "a control character (0x0A) at position 11");
  CHECK(refusal("http://h/\r\nHost: evil") == "a control character (0x0D) at position 10");
  CHECK(refusal("http://h\xc3\xa9/") == "a non-ASCII byte at position 9 (it must be percent-encoded, %XX)");
  CHECK(refusal("http://h/a|b") == "'|' at position 11, which must be percent-encoded");
  CHECK(refusal("http://h/a\\b") == "'\\' at position 11, which must be percent-encoded");
  CHECK(refusal("http://h/%zz") == "a '%' at position 10 not followed by two hex digits");
  CHECK(refusal("http://h/%4") == "a '%' at position 10 not followed by two hex digits");
  CHECK(refusal("http://h/#a#b") == "a second '#' at position 12");
}

TEST_CASE("host_port brackets an IPv6 address and only that, so a URL built from it reads back the same") {
  CHECK(host_port("10.0.0.1", 8000) == "10.0.0.1:8000");
  CHECK(host_port("spark1", 7443) == "spark1:7443");
  CHECK(host_port("fd00::1", 8000) == "[fd00::1]:8000");
  CHECK(host_port("::1", 1) == "[::1]:1");
  CHECK(http_base_url("fd00::2", 8888) == "http://[fd00::2]:8888");
  for (const std::string host : {"10.0.0.1", "fd00::1", "::1", "spark1"}) {
    auto back = parse_http_url(http_base_url(host, 8888) + "/health");
    REQUIRE_MESSAGE(back.ok(), host);
    CHECK(back->host == host);
    CHECK(back->port_or_default() == 8888);
    CHECK(back->authority() == host_port(host, 8888));
  }
}
