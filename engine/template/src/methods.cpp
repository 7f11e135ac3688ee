// Attribute and item access, slicing, `in`, and the Python methods templates call on strings,
// lists and dicts (message.content.startswith(...), ns.items.append(x), tool.get('x')).
#include <algorithm>
#include <cctype>

#include "error.hpp"
#include "filters.hpp"
#include "string_ops.hpp"
#include "tandem/utf8.hpp"

namespace tandem::tmpl::detail {
namespace {

std::string str_arg(const CallArgs& a, std::size_t i, std::string_view name, const std::string& fn) {
  Value v = a.get(i, name);
  if (!v.is_string()) fail(fn + "() argument '" + std::string(name) + "' must be str, not " + type_name(v));
  return v.as_string();
}

std::int64_t int_arg(const CallArgs& a, std::size_t i, std::string_view name, std::int64_t fallback) {
  Value v = a.get(i, name, None{});
  if (v.is_none()) return fallback;
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  fail("'" + std::string(name) + "' must be an integer, not " + type_name(v));
}

// startswith/endswith accept one prefix or a tuple/list of them.
bool affix_match(const Value& arg, const std::string& s, bool prefix) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) fail("startswith/endswith argument must be str or a tuple of str, not " + type_name(p));
    const std::string& x = p.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.as_list()->begin(), arg.as_list()->end(), one);
  return one(arg);
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&](auto fn) { return make_func("str." + name, [s, fn](CallArgs& a) -> Value { return fn(s, a); }); };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return bind([prefix](const std::string& str, CallArgs& a) -> Value {
      a.check(prefix ? "startswith" : "endswith", 1, {});
      return affix_match(a.get(0, ""), str, prefix);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return bind([left, right](const std::string& str, CallArgs& a) -> Value {
      a.check("strip", 1, {"chars"});
      Value chars = a.get(0, "chars", None{});
      return py_strip(str, chars.is_string() ? &chars.as_string() : nullptr, left, right);
    });
  }
  if (name == "split" || name == "rsplit") {
    bool from_right = name == "rsplit";
    return bind([from_right](const std::string& str, CallArgs& a) -> Value {
      a.check("split", 2, {"sep", "maxsplit"});
      Value sep = a.get(0, "sep", None{});
      if (!sep.is_none() && !sep.is_string()) fail("split() separator must be str or None");
      List parts;
      for (auto& p : py_split(str, sep.is_string() ? &sep.as_string() : nullptr, int_arg(a, 1, "maxsplit", -1), from_right))
        parts.emplace_back(std::move(p));
      return make_list(std::move(parts));
    });
  }
  if (name == "replace")
    return bind([](const std::string& str, CallArgs& a) -> Value {
      a.check("replace", 3, {"old", "new", "count"});
      return py_replace(str, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"), int_arg(a, 2, "count", -1));
    });
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase")
    return bind([name](const std::string& str, CallArgs& a) -> Value {
      a.check(name, 0, {});
      return py_case(str, name);
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return bind([name](const std::string& str, CallArgs& a) -> Value {
      a.check(name, 1, {});
      std::string sub = str_arg(a, 0, "sub", name);
      if (name == "count") return py_count(str, sub);
      std::int64_t at = py_find(str, sub, name[0] == 'r');
      if (at < 0 && (name == "index" || name == "rindex")) fail("substring not found");
      return at;
    });
  if (name == "join")
    return bind([](const std::string& str, CallArgs& a) -> Value {
      std::string out;
      bool first = true;
      for (const Value& item : iterate(a.get(0, "iterable"))) {
        if (!item.is_string()) fail("join() expects str items, found " + type_name(item));
        if (!first) out += str;
        first = false;
        out += item.as_string();
      }
      return out;
    });
  if (name == "format") return bind([](const std::string& str, CallArgs& a) -> Value { return py_format(str, a); });
  if (name == "splitlines")
    return bind([](const std::string& str, CallArgs&) -> Value {
      List out;
      for (auto& l : py_splitlines(str)) out.emplace_back(std::move(l));
      return make_list(std::move(out));
    });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower")
    return bind([name](const std::string& str, CallArgs&) -> Value { return py_is(str, name); });
  return Undefined{"'str object' has no attribute '" + name + "'"};
}

Value list_method(const ListPtr& list, const std::string& name) {
  auto bind = [&](auto fn) { return make_func("list." + name, [list, fn](CallArgs& a) -> Value { return fn(*list, a); }); };
  if (name == "append") return bind([](List& l, CallArgs& a) -> Value { a.check("append", 1, {}); l.push_back(a.get(0, "")); return None{}; });
  if (name == "extend")
    return bind([](List& l, CallArgs& a) -> Value {
      for (auto& v : iterate(a.get(0, ""))) l.push_back(v);
      return None{};
    });
  if (name == "insert")
    return bind([](List& l, CallArgs& a) -> Value {
      auto n = static_cast<std::int64_t>(l.size());
      std::int64_t i = std::clamp<std::int64_t>(int_arg(a, 0, "index", 0), -n, n);
      if (i < 0) i += n;
      l.insert(l.begin() + i, a.get(1, "object", None{}));
      return None{};
    });
  if (name == "pop")
    return bind([](List& l, CallArgs& a) -> Value {
      auto n = static_cast<std::int64_t>(l.size());
      std::int64_t i = int_arg(a, 0, "index", -1);
      if (i < 0) i += n;
      if (i < 0 || i >= n) fail("pop index out of range");
      Value v = l[static_cast<std::size_t>(i)];
      l.erase(l.begin() + i);
      return v;
    });
  if (name == "index" || name == "count")
    return bind([name](List& l, CallArgs& a) -> Value {
      Value x = a.get(0, "value");
      std::int64_t hits = 0;
      for (std::size_t i = 0; i < l.size(); ++i) {
        if (!equals(l[i], x)) continue;
        if (name == "index") return static_cast<std::int64_t>(i);
        ++hits;
      }
      if (name == "index") fail("value is not in list");
      return hits;
    });
  if (name == "copy") return bind([](List& l, CallArgs&) -> Value { return make_list(l); });
  if (name == "reverse") return bind([](List& l, CallArgs&) -> Value { std::reverse(l.begin(), l.end()); return None{}; });
  return Undefined{"'list object' has no attribute '" + name + "'"};
}

Value dict_method(const DictPtr& dict, const std::string& name) {
  auto bind = [&](auto fn) { return make_func("dict." + name, [dict, fn](CallArgs& a) -> Value { return fn(*dict, a); }); };
  if (name == "get")
    return bind([](Dict& d, CallArgs& a) -> Value {
      a.check("get", 2, {});
      Value k = a.get(0, "key");
      const Value* v = d.find(to_str(k));
      return v ? *v : a.get(1, "default", None{});
    });
  if (name == "items")
    return bind([](Dict& d, CallArgs&) -> Value {
      List out;
      for (auto& [k, v] : d.items) out.push_back(make_list({Value(k), v}));
      return make_list(std::move(out));
    });
  if (name == "keys")
    return bind([](Dict& d, CallArgs&) -> Value {
      List out;
      for (auto& kv : d.items) out.emplace_back(kv.first);
      return make_list(std::move(out));
    });
  if (name == "values")
    return bind([](Dict& d, CallArgs&) -> Value {
      List out;
      for (auto& kv : d.items) out.push_back(kv.second);
      return make_list(std::move(out));
    });
  if (name == "pop")
    return bind([](Dict& d, CallArgs& a) -> Value {
      std::string k = to_str(a.get(0, "key"));
      const Value* v = d.find(k);
      if (!v) {
        if (a.has(1, "default")) return a.get(1, "default");
        fail("KeyError: '" + k + "'");
      }
      Value out = *v;
      d.erase(k);
      return out;
    });
  if (name == "update")
    return bind([](Dict& d, CallArgs& a) -> Value {
      Value other = a.get(0, "other", None{});
      if (other.is_dict())
        for (auto& [k, v] : other.as_dict()->items) d.set(k, v);
      for (auto& [k, v] : a.kwargs) d.set(k, v);
      return None{};
    });
  if (name == "setdefault")
    return bind([](Dict& d, CallArgs& a) -> Value {
      std::string k = to_str(a.get(0, "key"));
      if (const Value* v = d.find(k)) return *v;
      Value v = a.get(1, "default", None{});
      d.set(k, v);
      return v;
    });
  if (name == "copy")
    return bind([](Dict& d, CallArgs&) -> Value {
      Value c = make_dict();
      c.as_dict()->items = d.items;
      return c;
    });
  return Undefined{};
}

// Python's slice.indices(): clamp start/stop for the step's direction.
std::vector<std::size_t> slice_positions(std::size_t n, const Value& start, const Value& stop, const Value& step) {
  auto as_i = [](const Value& v, const char* what) -> std::int64_t {
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool();
    fail(std::string("slice ") + what + " must be an integer or None");
  };
  auto len = static_cast<std::int64_t>(n);
  std::int64_t st = step.is_none() ? 1 : as_i(step, "step");
  if (st == 0) fail("slice step cannot be zero");
  auto norm = [&](const Value& v, std::int64_t lo, std::int64_t hi, std::int64_t dflt) {
    if (v.is_none()) return dflt;
    std::int64_t x = as_i(v, "index");
    if (x < 0) x += len;
    return std::clamp(x, lo, hi);
  };
  std::int64_t b, e;
  if (st > 0) {
    b = norm(start, 0, len, 0);
    e = norm(stop, 0, len, len);
  } else {
    b = norm(start, -1, len - 1, len - 1);
    e = norm(stop, -1, len - 1, -1);
  }
  std::vector<std::size_t> out;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<std::size_t>(i));
  return out;
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    const Dict& d = *obj.as_dict();
    if (d.kind == Dict::Kind::plain) {
      Value m = dict_method(obj.as_dict(), name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = d.find(name)) return *v;
    return Undefined{"'" + type_name(obj) + "' has no attribute '" + name + "'"};
  }
  if (obj.is_string()) return string_method(obj.as_string(), name);
  if (obj.is_list()) return list_method(obj.as_list(), name);
  if (obj.is_undefined()) fail_undefined(obj);
  return Undefined{"'" + type_name(obj) + "' has no attribute '" + name + "'"};
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (!key.is_list() && !key.is_dict())
      if (const Value* v = obj.as_dict()->find(to_str(key))) return *v;
    if (key.is_string()) return get_attribute(obj, key.as_string());
    return Undefined{"'" + type_name(obj) + "' has no attribute '" + to_str(key) + "'"};
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.is_int() ? key.as_int() : key.as_bool();
    if (obj.is_list()) {
      auto n = static_cast<std::int64_t>(obj.as_list()->size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Undefined{"list index out of range"};
      return (*obj.as_list())[static_cast<std::size_t>(i)];
    }
    std::u32string cps = utf8::decode(obj.as_string());
    auto n = static_cast<std::int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Undefined{"string index out of range"};
    return utf8::encode(cps.substr(static_cast<std::size_t>(i), 1));
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Undefined{"'" + type_name(obj) + "' has no item " + to_repr(key)};
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_list()) {
    List out;
    for (std::size_t i : slice_positions(obj.as_list()->size(), start, stop, step)) out.push_back((*obj.as_list())[i]);
    return make_list(std::move(out));
  }
  if (obj.is_string()) {
    std::u32string cps = utf8::decode(obj.as_string());
    std::u32string out;
    for (std::size_t i : slice_positions(cps.size(), start, stop, step)) out.push_back(cps[i]);
    return utf8::encode(out);
  }
  if (obj.is_undefined()) fail_undefined(obj);
  fail("'" + type_name(obj) + "' cannot be sliced");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (item.is_undefined()) fail_undefined(item);
    if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + type_name(item));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list())
    return std::any_of(container.as_list()->begin(), container.as_list()->end(),
                       [&](const Value& v) { return equals(v, item); });
  if (container.is_dict()) return item.is_string() && container.as_dict()->find(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;
  fail("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace tandem::tmpl::detail
