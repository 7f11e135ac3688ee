// Escaping for the HTML and SVG the controller writes (bind report page, bench chart): text from
// manifests, agents and engines goes into element text and attribute values, never raw.
#pragma once
#include <string>
#include <string_view>

namespace tandem::ctl {

// &, <, >, " and ' as entities: safe in element text and in either kind of quoted attribute.
inline std::string xml_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += ch;
    }
  }
  return o;
}

}  // namespace tandem::ctl
