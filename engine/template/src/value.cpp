#include "value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "error.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tmpl::detail {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void Dict::set(std::string key, Value value) {
  if (Value* slot = find(key)) {
    *slot = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}
bool Dict::erase(std::string_view key) {
  auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == key; });
  if (it == items.end()) return false;
  items.erase(it);
  return true;
}

Value CallArgs::get(std::size_t index, std::string_view name, Value fallback) const {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  return fallback;
}
bool CallArgs::has(std::size_t index, std::string_view name) const {
  if (index < args.size()) return true;
  return std::any_of(kwargs.begin(), kwargs.end(), [&](const auto& kv) { return kv.first == name; });
}
void CallArgs::check(std::string_view fn, std::size_t max_positional,
                     std::initializer_list<std::string_view> names) const {
  if (args.size() > max_positional)
    fail("'" + std::string(fn) + "' takes at most " + std::to_string(max_positional) +
         " positional arguments (" + std::to_string(args.size()) + " given)");
  for (const auto& [k, v] : kwargs)
    if (std::find(names.begin(), names.end(), k) == names.end())
      fail("'" + std::string(fn) + "' got an unexpected keyword argument '" + k + "'");
}

Value make_list(List items) { return Value(std::make_shared<List>(std::move(items))); }
Value make_dict(Dict::Kind kind) {
  auto d = std::make_shared<Dict>();
  d->kind = kind;
  return Value(std::move(d));
}
Value make_func(std::string name, std::function<Value(CallArgs&)> fn) {
  return Value(FuncPtr(std::make_shared<const Function>(Function{std::move(name), std::move(fn)})));
}

bool truthy(const Value& v) {
  switch (v.v.index()) {
    case 0: case 1: return false;
    case 2: return v.as_bool();
    case 3: return v.as_int() != 0;
    case 4: return v.as_float() != 0.0;
    case 5: return !v.as_string().empty();
    case 6: return !v.as_list()->empty();
    case 7: return !v.as_dict()->items.empty();
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16, else exponent.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  auto epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::stoi(sci.substr(epos + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else {
      auto whole = static_cast<std::size_t>(exp) + 1;
      if (digits.size() <= whole) {
        out += digits + std::string(whole - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, whole) + "." + digits.substr(whole);
      }
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += e;
  }
  return out;
}

static std::string repr_string(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\x%02x", u & 0xFFu);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string to_repr(const Value& v) {
  if (v.is_string()) return repr_string(v.as_string());
  if (v.is_list()) {
    std::string out = "[";
    bool first = true;
    for (const auto& item : *v.as_list()) {
      if (!first) out += ", ";
      first = false;
      out += to_repr(item);
    }
    return out + "]";
  }
  if (v.is_dict()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, item] : v.as_dict()->items) {
      if (!first) out += ", ";
      first = false;
      out += repr_string(k) + ": " + to_repr(item);
    }
    return out + "}";
  }
  return to_str(v);
}

std::string to_str(const Value& v) {
  switch (v.v.index()) {
    case 0: return "";
    case 1: return "None";
    case 2: return v.as_bool() ? "True" : "False";
    case 3: return std::to_string(v.as_int());
    case 4: return float_repr(v.as_float());
    case 5: return v.as_string();
    case 6: case 7: return to_repr(v);
    default: return "<function " + v.as_func()->name + ">";
  }
}

static std::string py_type(const Value& v) {
  switch (v.v.index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return "list";
    case 7: return v.as_dict()->kind == Dict::Kind::namespace_ ? "Namespace" : "dict";
    default: return "function";
  }
}

std::string type_name(const Value& v) {
  if (v.is_none()) return "None";
  return py_type(v) + " object";
}

double to_double(const Value& v) {
  if (v.is_int()) return static_cast<double>(v.as_int());
  if (v.is_float()) return v.as_float();
  if (v.is_bool()) return v.as_bool() ? 1.0 : 0.0;
  if (v.is_undefined()) fail_undefined(v);
  fail("expected a number, got " + type_name(v));
}

std::string undefined_message(const Value& v) {
  const auto& hint = v.as_undefined().hint;
  return hint.empty() ? "value is undefined" : hint;
}

void fail_undefined(const Value& v) { fail(undefined_message(v)); }

static bool numeric(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }

bool equals(const Value& a, const Value& b) {
  if (numeric(a) && numeric(b)) {
    if (!a.is_float() && !b.is_float()) {
      auto ai = a.is_bool() ? static_cast<std::int64_t>(a.as_bool()) : a.as_int();
      auto bi = b.is_bool() ? static_cast<std::int64_t>(b.as_bool()) : b.as_int();
      return ai == bi;
    }
    return to_double(a) == to_double(b);
  }
  if (a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0: case 1: return true;
    case 5: return a.as_string() == b.as_string();
    case 6: {
      const auto& x = *a.as_list();
      const auto& y = *b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case 7: {
      const auto& x = *a.as_dict();
      const auto& y = *b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, item] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    default: return a.as_func() == b.as_func();
  }
}

bool less(const Value& a, const Value& b) {
  if (numeric(a) && numeric(b)) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    return to_double(a) < to_double(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = *a.as_list();
    const auto& y = *b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("'<' not supported between instances of '" + py_type(a) + "' and '" + py_type(b) + "'");
}

std::size_t length(const Value& v) {
  if (v.is_string()) return utf8::length(v.as_string());
  if (v.is_list()) return v.as_list()->size();
  if (v.is_dict()) return v.as_dict()->items.size();
  if (v.is_undefined()) return 0;
  fail("object of type '" + py_type(v) + "' has no len()");
}

List iterate(const Value& v) {
  if (v.is_list()) return *v.as_list();
  if (v.is_dict()) {
    List keys;
    for (const auto& kv : v.as_dict()->items) keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    List chars;
    for (char32_t c : utf8::decode(v.as_string())) {
      std::string s;
      utf8::append(s, c);
      chars.emplace_back(std::move(s));
    }
    return chars;
  }
  if (v.is_undefined()) return {};
  fail("'" + py_type(v) + "' object is not iterable");
}

template <class J>
static Value convert(const J& j) {
  switch (j.type()) {
    case J::value_t::null: return None{};
    case J::value_t::boolean: return j.template get<bool>();
    case J::value_t::number_integer: return j.template get<std::int64_t>();
    case J::value_t::number_unsigned: {
      auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return static_cast<double>(u);
      return static_cast<std::int64_t>(u);
    }
    case J::value_t::number_float: return j.template get<double>();
    case J::value_t::string: return j.template get<std::string>();
    case J::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e));
      return make_list(std::move(items));
    }
    case J::value_t::object: {
      Value d = make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.as_dict()->items.emplace_back(it.key(), convert(it.value()));
      return d;
    }
    default: return None{};  // binary / discarded: not produced by JSON parsing
  }
}

Value from_json(const nlohmann::ordered_json& j) { return convert(j); }
Value from_json(const nlohmann::json& j) { return convert(j); }

}  // namespace tandem::tmpl::detail
