// Tests (`x is name`), as jinja2 defines them. Note jinja2's `number` includes booleans (Python's
// bool is a Number) while `integer` excludes them.
#include <functional>
#include <unordered_map>

#include "error.hpp"
#include "filters.hpp"

namespace tandem::tmpl::detail {
namespace {

using TestFn = std::function<bool(const Value&, CallArgs&)>;

std::int64_t need_int(const Value& v, const char* test) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  if (v.is_undefined()) fail_undefined(v);
  fail(std::string("test '") + test + "' needs an integer, got " + type_name(v));
}

const std::unordered_map<std::string, TestFn>& registry() {
  static const std::unordered_map<std::string, TestFn> r = [] {
    std::unordered_map<std::string, TestFn> m;
    m["defined"] = [](const Value& v, CallArgs&) { return !v.is_undefined(); };
    m["undefined"] = [](const Value& v, CallArgs&) { return v.is_undefined(); };
    m["none"] = [](const Value& v, CallArgs&) { return v.is_none(); };
    m["string"] = [](const Value& v, CallArgs&) { return v.is_string(); };
    m["number"] = [](const Value& v, CallArgs&) { return v.is_number() || v.is_bool(); };
    m["integer"] = [](const Value& v, CallArgs&) { return v.is_int(); };
    m["float"] = [](const Value& v, CallArgs&) { return v.is_float(); };
    m["boolean"] = [](const Value& v, CallArgs&) { return v.is_bool(); };
    m["true"] = [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); };
    m["false"] = [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); };
    m["mapping"] = [](const Value& v, CallArgs&) { return v.is_dict(); };
    m["iterable"] = [](const Value& v, CallArgs&) { return v.is_list() || v.is_dict() || v.is_string(); };
    m["sequence"] = m["iterable"];
    m["callable"] = [](const Value& v, CallArgs&) { return v.is_func(); };
    m["odd"] = [](const Value& v, CallArgs&) { return need_int(v, "odd") % 2 != 0; };
    m["even"] = [](const Value& v, CallArgs&) { return need_int(v, "even") % 2 == 0; };
    m["divisibleby"] = [](const Value& v, CallArgs& a) {
      std::int64_t d = need_int(a.get(0, "num"), "divisibleby");
      if (d == 0) fail("integer division or modulo by zero");
      return need_int(v, "divisibleby") % d == 0;
    };
    m["eq"] = m["equalto"] = m["=="] = [](const Value& v, CallArgs& a) { return equals(v, a.get(0, "other")); };
    m["ne"] = m["!="] = [](const Value& v, CallArgs& a) { return !equals(v, a.get(0, "other")); };
    m["lt"] = m["lessthan"] = m["<"] = [](const Value& v, CallArgs& a) { return less(v, a.get(0, "other")); };
    m["gt"] = m["greaterthan"] = m[">"] = [](const Value& v, CallArgs& a) { return less(a.get(0, "other"), v); };
    m["le"] = m["<="] = [](const Value& v, CallArgs& a) { return !less(a.get(0, "other"), v); };
    m["ge"] = m[">="] = [](const Value& v, CallArgs& a) { return !less(v, a.get(0, "other")); };
    m["in"] = [](const Value& v, CallArgs& a) { return contains(a.get(0, "seq"), v); };
    m["sameas"] = [](const Value& v, CallArgs& a) {
      Value o = a.get(0, "other");
      if (v.v.index() != o.v.index()) return false;
      if (v.is_list()) return v.as_list() == o.as_list();
      if (v.is_dict()) return v.as_dict() == o.as_dict();
      return equals(v, o);
    };
    m["lower"] = [](const Value& v, CallArgs&) {
      if (!v.is_string()) return false;
      for (char c : v.as_string()) if (c >= 'A' && c <= 'Z') return false;
      return true;
    };
    m["upper"] = [](const Value& v, CallArgs&) {
      if (!v.is_string()) return false;
      for (char c : v.as_string()) if (c >= 'a' && c <= 'z') return false;
      return true;
    };
    m["escaped"] = [](const Value&, CallArgs&) { return false; };
    m["filter"] = [](const Value& v, CallArgs&) { return v.is_string() && is_filter(v.as_string()); };
    m["test"] = [](const Value& v, CallArgs&) { return v.is_string() && is_test(v.as_string()); };
    return m;
  }();
  return r;
}

}  // namespace

bool is_test(std::string_view name) { return registry().count(std::string(name)) != 0; }

bool apply_test(std::string_view name, const Value& input, CallArgs& args) {
  auto it = registry().find(std::string(name));
  if (it == registry().end()) fail("no test named '" + std::string(name) + "'");
  return it->second(input, args);
}

}  // namespace tandem::tmpl::detail
