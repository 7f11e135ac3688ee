// Filters, with jinja2's argument names and defaults, plus transformers' tojson.
#include "filters.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unordered_map>

#include "error.hpp"
#include "string_ops.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tmpl::detail {
namespace {

using FilterFn = std::function<Value(const Value&, CallArgs&)>;

bool flag(const CallArgs& a, std::size_t i, std::string_view name, bool fallback) {
  Value v = a.get(i, name, fallback);
  return truthy(v);
}

// attribute="a.b.0" paths, as jinja2's make_attrgetter.
Value attr_path(const Value& obj, const std::string& path) {
  Value cur = obj;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is_undefined()) return cur;
    cur = numeric ? get_item(cur, Value(static_cast<std::int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Sort/unique key: with case_sensitive off, strings compare lowercased (jinja2's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return py_case(v.as_string(), "lower");
  return v;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value to_int(const Value& v, const Value& fallback, int base) {
  if (v.is_int()) return v;
  if (v.is_bool()) return static_cast<std::int64_t>(v.as_bool());
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return fallback;
    return static_cast<std::int64_t>(d);
  }
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), nullptr, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    long long r = std::strtoll(s.c_str(), &end, base);
    if (end && *end == '\0' && errno == 0) return static_cast<std::int64_t>(r);
    end = nullptr;
    double d = std::strtod(s.c_str(), &end);  // jinja2 falls back to int(float(s))
    if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return static_cast<std::int64_t>(d);
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return to_double(v);
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), nullptr, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return d;
  }
  return fallback;
}

Value round_value(const Value& v, std::int64_t precision, const std::string& method) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number() && !v.is_bool()) fail("round: expected a number, got " + type_name(v));
  if (method == "common" && (v.is_int() || v.is_bool())) return v.is_bool() ? Value(static_cast<std::int64_t>(v.as_bool())) : v;
  double x = to_double(v);
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "floor") return std::floor(x * scale) / scale;
  if (method == "ceil") return std::ceil(x * scale) / scale;
  if (method != "common") fail("round: method must be 'common', 'ceil' or 'floor'");
  // Python's round(): correctly rounded to `precision` decimals, ties to even; printf does the same.
  if (precision < 0 || precision > 300) return std::nearbyint(x * scale) / scale;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
  return std::strtod(buf, nullptr);
}

std::string do_indent(std::string s, const Value& width, bool first, bool blank) {
  std::string ind = width.is_string() ? width.as_string() : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, width.is_int() ? width.as_int() : 4)), ' ');
  s += "\n";  // as jinja2: makes a trailing newline produce an (unindented) empty last line
  std::vector<std::string> lines = py_splitlines(s);
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    bool indent_this = i > 0 && (blank || !lines[i].empty());
    out += (indent_this ? ind : "") + lines[i];
  }
  if (first) out = ind + out;
  return out;
}

Value select_impl(const Value& seq, CallArgs& a, bool by_attr, bool keep_matching) {
  List out;
  std::size_t test_at = by_attr ? 1 : 0;
  std::string attr = by_attr ? to_str(a.get(0, "attribute")) : "";
  std::string test = a.args.size() > test_at ? to_str(a.args[test_at]) : "";
  if (!test.empty() && !is_test(test)) fail("no test named '" + test + "'");
  CallArgs test_args;
  for (std::size_t i = test_at + 1; i < a.args.size(); ++i) test_args.args.push_back(a.args[i]);
  for (const Value& item : iterate(seq)) {
    Value subject = by_attr ? attr_path(item, attr) : item;
    bool hit = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
    if (hit == keep_matching) out.push_back(item);
  }
  return make_list(std::move(out));
}

// long-function: the filter table itself, one short lambda per filter; split up, it would only
// scatter the table.
const std::unordered_map<std::string, FilterFn>& registry() {
  static const std::unordered_map<std::string, FilterFn> r = [] {
    std::unordered_map<std::string, FilterFn> m;
    m["tojson"] = [](const Value& v, CallArgs& a) -> Value {
      a.check("tojson", 1, {"indent", "ensure_ascii", "separators", "sort_keys"});
      Value ind = a.get(0, "indent", None{});
      std::optional<std::string> indent;
      if (ind.is_int()) indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, ind.as_int())), ' ');
      else if (ind.is_string()) indent = ind.as_string();
      std::string item_sep = indent ? "," : ", ", key_sep = ": ";
      Value seps = a.get(99, "separators", None{});
      if (seps.is_list() && seps.as_list()->size() == 2) {
        item_sep = to_str((*seps.as_list())[0]);
        key_sep = to_str((*seps.as_list())[1]);
      }
      return dump_json(v, indent, flag(a, 99, "ensure_ascii", false), flag(a, 99, "sort_keys", false), item_sep, key_sep);
    };
    m["string"] = [](const Value& v, CallArgs&) -> Value { return to_str(v); };
    m["safe"] = m["string"];
    m["e"] = m["escape"] = m["forceescape"] = [](const Value& v, CallArgs&) -> Value { return escape_html(to_str(v)); };
    m["trim"] = [](const Value& v, CallArgs& a) -> Value {
      Value chars = a.get(0, "chars", None{});
      return py_strip(to_str(v), chars.is_string() ? &chars.as_string() : nullptr, true, true);
    };
    for (const char* how : {"upper", "lower", "title", "capitalize"})
      m[how] = [how = std::string(how)](const Value& v, CallArgs&) -> Value { return py_case(to_str(v), how); };
    m["length"] = m["count"] = [](const Value& v, CallArgs&) -> Value { return static_cast<std::int64_t>(length(v)); };
    m["d"] = m["default"] = [](const Value& v, CallArgs& a) -> Value {
      bool boolean = flag(a, 1, "boolean", false);
      if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", std::string());
      return v;
    };
    m["first"] = [](const Value& v, CallArgs&) -> Value {
      List items = iterate(v);
      return items.empty() ? Value(Undefined{"first: sequence is empty"}) : items.front();
    };
    m["last"] = [](const Value& v, CallArgs&) -> Value {
      List items = iterate(v);
      return items.empty() ? Value(Undefined{"last: sequence is empty"}) : items.back();
    };
    m["join"] = [](const Value& v, CallArgs& a) -> Value {
      std::string sep = to_str(a.get(0, "d", std::string()));
      Value attr = a.get(1, "attribute", None{});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(attr.is_none() ? item : attr_path(item, to_str(attr)));
      }
      return out;
    };
    m["replace"] = [](const Value& v, CallArgs& a) -> Value {
      Value count = a.get(2, "count", None{});
      return py_replace(to_str(v), to_str(a.get(0, "old")), to_str(a.get(1, "new")), count.is_int() ? count.as_int() : -1);
    };
    m["int"] = [](const Value& v, CallArgs& a) -> Value {
      Value base = a.get(1, "base", 10);
      return to_int(v, a.get(0, "default", 0), base.is_int() ? static_cast<int>(base.as_int()) : 10);
    };
    m["float"] = [](const Value& v, CallArgs& a) -> Value { return to_float(v, a.get(0, "default", 0.0)); };
    m["list"] = [](const Value& v, CallArgs&) -> Value { return make_list(iterate(v)); };
    m["items"] = [](const Value& v, CallArgs&) -> Value {
      if (v.is_undefined()) return make_list();
      if (!v.is_dict()) fail("items: expected a mapping, got " + type_name(v));
      List out;
      for (const auto& [k, x] : v.as_dict()->items) out.push_back(make_list({Value(k), x}));
      return make_list(std::move(out));
    };
    m["map"] = [](const Value& v, CallArgs& a) -> Value {
      List out;
      Value attr = a.get(99, "attribute", None{});
      if (!attr.is_none()) {
        Value dflt = a.get(99, "default", Undefined{});
        for (const Value& item : iterate(v)) {
          Value x = attr_path(item, to_str(attr));
          out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
        }
        return make_list(std::move(out));
      }
      if (a.args.empty()) fail("map: expected a filter name or attribute=");
      std::string name = to_str(a.args[0]);
      if (!is_filter(name)) fail("no filter named '" + name + "'");
      CallArgs rest;
      rest.args.assign(a.args.begin() + 1, a.args.end());
      rest.kwargs = a.kwargs;
      for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, rest));
      return make_list(std::move(out));
    };
    m["select"] = [](const Value& v, CallArgs& a) -> Value { return select_impl(v, a, false, true); };
    m["reject"] = [](const Value& v, CallArgs& a) -> Value { return select_impl(v, a, false, false); };
    m["selectattr"] = [](const Value& v, CallArgs& a) -> Value { return select_impl(v, a, true, true); };
    m["rejectattr"] = [](const Value& v, CallArgs& a) -> Value { return select_impl(v, a, true, false); };
    m["dictsort"] = [](const Value& v, CallArgs& a) -> Value {
      if (!v.is_dict()) fail("dictsort: expected a mapping, got " + type_name(v));
      bool cs = flag(a, 0, "case_sensitive", false);
      std::string by = to_str(a.get(1, "by", std::string("key")));
      bool rev = flag(a, 2, "reverse", false);
      auto items = v.as_dict()->items;
      std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        Value kx = by == "value" ? x.second : Value(x.first), ky = by == "value" ? y.second : Value(y.first);
        return rev ? less(sort_key(ky, cs), sort_key(kx, cs)) : less(sort_key(kx, cs), sort_key(ky, cs));
      });
      List out;
      for (auto& [k, x] : items) out.push_back(make_list({Value(k), x}));
      return make_list(std::move(out));
    };
    m["sort"] = [](const Value& v, CallArgs& a) -> Value {
      bool rev = flag(a, 0, "reverse", false), cs = flag(a, 1, "case_sensitive", false);
      Value attr = a.get(2, "attribute", None{});
      List items = iterate(v);
      auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attr_path(x, to_str(attr)), cs); };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return rev ? less(key(y), key(x)) : less(key(x), key(y));
      });
      return make_list(std::move(items));
    };
    m["unique"] = [](const Value& v, CallArgs& a) -> Value {
      bool cs = flag(a, 0, "case_sensitive", false);
      Value attr = a.get(1, "attribute", None{});
      List out, seen;
      for (const Value& item : iterate(v)) {
        Value k = sort_key(attr.is_none() ? item : attr_path(item, to_str(attr)), cs);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
        seen.push_back(k);
        out.push_back(item);
      }
      return make_list(std::move(out));
    };
    m["reverse"] = [](const Value& v, CallArgs&) -> Value {
      if (v.is_string()) {
        std::u32string cps = utf8::decode(v.as_string());
        std::reverse(cps.begin(), cps.end());
        return utf8::encode(cps);
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return make_list(std::move(items));
    };
    m["indent"] = [](const Value& v, CallArgs& a) -> Value {
      return do_indent(to_str(v), a.get(0, "width", 4), flag(a, 1, "first", false), flag(a, 2, "blank", false));
    };
    m["round"] = [](const Value& v, CallArgs& a) -> Value {
      Value p = a.get(0, "precision", 0);
      return round_value(v, p.is_int() ? p.as_int() : 0, to_str(a.get(1, "method", std::string("common"))));
    };
    m["abs"] = [](const Value& v, CallArgs&) -> Value {
      if (v.is_int()) {
        if (v.as_int() == INT64_MIN) fail("integer overflow");
        return v.as_int() < 0 ? -v.as_int() : v.as_int();
      }
      if (v.is_bool()) return static_cast<std::int64_t>(v.as_bool());
      return std::fabs(to_double(v));
    };
    auto minmax = [](bool want_max) {
      return [want_max](const Value& v, CallArgs& a) -> Value {
        bool cs = flag(a, 0, "case_sensitive", false);
        Value attr = a.get(1, "attribute", None{});
        List items = iterate(v);
        if (items.empty()) return Undefined{"no items in sequence"};
        auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attr_path(x, to_str(attr)), cs); };
        Value best = items[0];
        for (const Value& x : items)
          if (want_max ? less(key(best), key(x)) : less(key(x), key(best))) best = x;
        return best;
      };
    };
    m["max"] = minmax(true);
    m["min"] = minmax(false);
    m["sum"] = [](const Value& v, CallArgs& a) -> Value {
      Value attr = a.get(0, "attribute", None{});
      Value acc = a.get(1, "start", 0);
      for (const Value& x : iterate(v)) {
        Value item = attr.is_none() ? x : attr_path(x, to_str(attr));
        if (acc.is_int() && item.is_int()) {
          std::int64_t total = 0;
          if (__builtin_add_overflow(acc.as_int(), item.as_int(), &total)) fail("integer overflow");
          acc = total;
        } else {
          acc = to_double(acc) + to_double(item);
        }
      }
      return acc;
    };
    m["batch"] = [](const Value& v, CallArgs& a) -> Value {
      Value n = a.get(0, "linecount");
      if (!n.is_int() || n.as_int() <= 0) fail("batch: linecount must be a positive integer");
      auto size = static_cast<std::size_t>(n.as_int());
      Value fill = a.get(1, "fill_with", None{});
      List out, cur;
      for (const Value& x : iterate(v)) {
        cur.push_back(x);
        if (cur.size() == size) {
          out.push_back(make_list(std::move(cur)));
          cur.clear();
        }
      }
      if (!cur.empty()) {
        if (!fill.is_none()) while (cur.size() < size) cur.push_back(fill);
        out.push_back(make_list(std::move(cur)));
      }
      return make_list(std::move(out));
    };
    m["attr"] = [](const Value& v, CallArgs& a) -> Value { return get_attribute(v, to_str(a.get(0, "name"))); };
    m["format"] = [](const Value& v, CallArgs& a) -> Value {
      return percent_format(to_str(v), make_list(a.args));
    };
    m["wordcount"] = [](const Value& v, CallArgs&) -> Value {
      return static_cast<std::int64_t>(py_split(to_str(v), nullptr, -1, false).size());
    };
    m["center"] = [](const Value& v, CallArgs& a) -> Value {
      std::string s = to_str(v);
      Value w = a.get(0, "width", 80);
      std::size_t width = w.is_int() && w.as_int() > 0 ? static_cast<std::size_t>(std::min<std::int64_t>(w.as_int(), 1 << 20)) : 0;
      std::size_t len = utf8::length(s);
      if (width <= len) return s;
      std::size_t total = width - len, left = total / 2 + (total & width & 1);
      return std::string(left, ' ') + s + std::string(total - left, ' ');
    };
    return m;
  }();
  return r;
}

}  // namespace

bool is_filter(std::string_view name) { return registry().count(std::string(name)) != 0; }

Value apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  auto it = registry().find(std::string(name));
  if (it == registry().end()) fail("no filter named '" + std::string(name) + "'");
  return it->second(input, args);
}

std::string percent_format(const std::string& fmt, const Value& args) {
  List items = args.is_list() ? *args.as_list() : List{args};
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("format: incomplete format");
    char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) fail("format: not enough arguments for format string");
    const Value& v = items[next++];
    switch (c) {
      case 's': out += to_str(v); break;
      case 'r': out += to_repr(v); break;
      case 'd': case 'i': out += to_str(to_int(v, v, 10)); break;
      case 'f': {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%f", to_double(v));
        out += buf;
        break;
      }
      default: fail(std::string("format: unsupported format character '") + c + "'");
    }
  }
  if (next < items.size() && args.is_list()) fail("format: not all arguments converted during string formatting");
  return out;
}

}  // namespace tandem::tmpl::detail
