// Names that end up in paths, unit names, certificate CNs and URLs. One definition of each, so
// the manifest, the controller and the HTTP clients agree on what is allowed.
#pragma once
#include <string>
#include <string_view>

namespace tandem {

// A lowercase DNS label (RFC 1123): 1 to 63 characters of a-z, 0-9 and '-', not starting or
// ending with '-'. Node names and bind names are labels: they become certificate CNs, directory
// names under the state directory and systemd unit names, so nothing in them may be a path
// separator, a dot, shell or unit syntax.
bool is_dns_label(std::string_view s);

// What a message says a label must be (kept next to the rule so the two cannot drift).
inline constexpr const char* kDnsLabelExpected =
    "expected a lowercase DNS label (a-z, 0-9, '-'; at most 63 characters)";

// A host name for a URL: dot-separated labels of letters (either case), digits and '-', each 1 to
// 63 characters and not starting or ending with '-', at most 253 characters in all; one trailing
// dot (a fully qualified name) is allowed. An all-numeric name is not a host name (it is an IPv4
// address or a mistake).
bool is_hostname(std::string_view s);

// `s` with control characters and other non-printable ASCII written as escapes (\n, \t, \x00),
// so a hostile value quoted in a message cannot split the message's line or hide text.
std::string printable(std::string_view s);

}  // namespace tandem
