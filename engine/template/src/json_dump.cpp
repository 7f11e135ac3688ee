// tojson as transformers defines it: Python's json.dumps(x, ensure_ascii=False, indent=indent,
// separators=..., sort_keys=...). Note it is NOT jinja2's own htmlsafe tojson (no \u003c escapes).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "error.hpp"
#include "tandem/utf8.hpp"
#include "value.hpp"

namespace tandem::tmpl::detail {
namespace {

void put_u(std::string& out, unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", v & 0xFFFFu);  // Python writes lowercase hex
  out += buf;
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto escape = [&](char32_t c) {
    switch (c) {
      case '"': out += "\\\""; return;
      case '\\': out += "\\\\"; return;
      case '\n': out += "\\n"; return;
      case '\r': out += "\\r"; return;
      case '\t': out += "\\t"; return;
      case '\b': out += "\\b"; return;
      case '\f': out += "\\f"; return;
      default: break;
    }
    if (c < 0x20) {
      put_u(out, static_cast<unsigned>(c));
    } else if (c < 0x80 || !ensure_ascii) {
      utf8::append(out, c);
    } else if (c < 0x10000) {
      put_u(out, static_cast<unsigned>(c));
    } else {  // surrogate pair, as Python does for astral code points
      auto v = static_cast<unsigned>(c) - 0x10000u;
      put_u(out, 0xD800u + (v >> 10));
      put_u(out, 0xDC00u + (v & 0x3FFu));
    }
  };
  if (utf8::is_ascii(s) || !ensure_ascii) {
    // Fast path: bytes >= 0x80 pass through unchanged when ensure_ascii is off.
    for (char c : s) {
      auto u = static_cast<unsigned char>(c);
      if (u >= 0x80) out += c;
      else escape(u);
    }
  } else {
    for (char32_t c : utf8::decode(s)) escape(c);
  }
  out += '"';
}

struct Dumper {
  const std::optional<std::string>& indent;
  bool ensure_ascii;
  bool sort_keys;
  std::string_view item_sep;
  std::string_view key_sep;
  std::string out;
  int depth = 0;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *indent;
  }

  void dump(const Value& v) {
    if (++depth > 512) fail("tojson: value nested too deeply");
    switch (v.v.index()) {
      case 0: fail("Object of type Undefined is not JSON serializable");
      case 1: out += "null"; break;
      case 2: out += v.as_bool() ? "true" : "false"; break;
      case 3: out += std::to_string(v.as_int()); break;
      case 4: {
        double d = v.as_float();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
        else out += float_repr(d);
        break;
      }
      case 5: dump_string(out, v.as_string(), ensure_ascii); break;
      case 6: {
        const auto& items = *v.as_list();
        if (items.empty()) { out += "[]"; break; }
        out += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent) newline(depth);
          dump(items[i]);
        }
        if (indent) newline(depth - 1);
        out += ']';
        break;
      }
      case 7: {
        auto items = v.as_dict()->items;
        if (items.empty()) { out += "{}"; break; }
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent) newline(depth);
          dump_string(out, items[i].first, ensure_ascii);
          out += key_sep;
          dump(items[i].second);
        }
        if (indent) newline(depth - 1);
        out += '}';
        break;
      }
      default: fail("Object of type function is not JSON serializable");
    }
    --depth;
  }
};

}  // namespace

std::string dump_json(const Value& v, const std::optional<std::string>& indent, bool ensure_ascii,
                      bool sort_keys, std::string_view item_sep, std::string_view key_sep) {
  Dumper d{indent, ensure_ascii, sort_keys, item_sep, key_sep, {}, 0};
  d.dump(v);
  return std::move(d.out);
}

}  // namespace tandem::tmpl::detail
