// The value model: what a Jinja expression evaluates to. Python semantics, because chat templates
// are written against jinja2 running in Python: lists and dicts are shared by reference (so
// ns.items.append(x) is seen everywhere), dicts keep insertion order, ints and floats differ.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::tmpl::detail {

struct Value;
struct Dict;
struct CallArgs;
using List = std::vector<Value>;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;

struct Function {
  std::string name;  // for error messages: "'name' ..."
  std::function<Value(CallArgs&)> call;
};
using FuncPtr = std::shared_ptr<const Function>;

// jinja2's default Undefined: prints empty, is falsy, iterates as empty; most other uses fail with
// `hint` as the message (e.g. "'foo' is undefined", "'dict object' has no attribute 'x'").
struct Undefined {
  std::string hint;
};
struct None {};

struct Value {
  std::variant<Undefined, None, bool, std::int64_t, double, std::string, ListPtr, DictPtr, FuncPtr> v;

  Value() = default;
  Value(Undefined u) : v(std::move(u)) {}          // NOLINT
  Value(None n) : v(n) {}                           // NOLINT
  Value(bool b) : v(b) {}                           // NOLINT
  Value(std::int64_t i) : v(i) {}                   // NOLINT
  Value(int i) : v(static_cast<std::int64_t>(i)) {} // NOLINT
  Value(double d) : v(d) {}                         // NOLINT
  Value(std::string s) : v(std::move(s)) {}         // NOLINT
  Value(const char* s) : v(std::string(s)) {}       // NOLINT
  Value(ListPtr l) : v(std::move(l)) {}             // NOLINT
  Value(DictPtr d) : v(std::move(d)) {}             // NOLINT
  Value(FuncPtr f) : v(std::move(f)) {}             // NOLINT

  bool is_undefined() const { return v.index() == 0; }
  bool is_none() const { return v.index() == 1; }
  bool is_bool() const { return v.index() == 2; }
  bool is_int() const { return v.index() == 3; }
  bool is_float() const { return v.index() == 4; }
  bool is_number() const { return is_int() || is_float(); }  // bool excluded, as jinja2's `number` test
  bool is_string() const { return v.index() == 5; }
  bool is_list() const { return v.index() == 6; }
  bool is_dict() const { return v.index() == 7; }
  bool is_func() const { return v.index() == 8; }

  bool as_bool() const { return std::get<bool>(v); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v); }
  double as_float() const { return std::get<double>(v); }
  const std::string& as_string() const { return std::get<std::string>(v); }
  const ListPtr& as_list() const { return std::get<ListPtr>(v); }
  const DictPtr& as_dict() const { return std::get<DictPtr>(v); }
  const FuncPtr& as_func() const { return std::get<FuncPtr>(v); }
  const Undefined& as_undefined() const { return std::get<Undefined>(v); }
};

// An insertion-ordered dict with string keys (chat-template data comes from JSON, whose keys are
// strings; a non-string key in a dict literal is stored by its str()). Linear lookup is fine for
// the handful of keys a message has.
struct Dict {
  enum class Kind { plain, namespace_, loop };
  Kind kind = Kind::plain;  // namespace() objects accept attribute assignment; loop is read-only
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);
  bool erase(std::string_view key);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // The parameter at `index` or named `name`; `fallback` when neither was passed.
  Value get(std::size_t index, std::string_view name, Value fallback = Undefined{}) const;
  bool has(std::size_t index, std::string_view name) const;
  // Fails with "'fn' got an unexpected keyword argument" / too many positional arguments.
  void check(std::string_view fn, std::size_t max_positional,
             std::initializer_list<std::string_view> names) const;
};

Value make_list(List items = {});
Value make_dict(Dict::Kind kind = Dict::Kind::plain);
Value make_func(std::string name, std::function<Value(CallArgs&)> fn);

// Python truthiness; Undefined is falsy.
bool truthy(const Value& v);
// Python str(): None -> "None", True -> "True", floats as repr, containers as repr; Undefined -> "".
std::string to_str(const Value& v);
// Python repr() (used inside containers).
std::string to_repr(const Value& v);
std::string float_repr(double d);
std::string type_name(const Value& v);  // "dict object", "str object", ... as jinja2 words it
// Python ==; ints, floats and bools compare numerically.
bool equals(const Value& a, const Value& b);
// Python <: numbers, strings, lists; anything else fails.
bool less(const Value& a, const Value& b);
// Python len(); fails for values without a length (numbers, None).
std::size_t length(const Value& v);
// The elements a `for` loop visits: list items, dict keys, string characters; Undefined -> none.
List iterate(const Value& v);
// Numeric view of int, float or bool, for arithmetic.
double to_double(const Value& v);
[[noreturn]] void fail_undefined(const Value& v);  // fails with the Undefined's hint
std::string undefined_message(const Value& v);

Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);
// Python json.dumps as transformers' tojson calls it (ensure_ascii=False by default).
// indent: none for one line; otherwise the text for one level (Python turns an int into spaces).
std::string dump_json(const Value& v, const std::optional<std::string>& indent, bool ensure_ascii,
                      bool sort_keys, std::string_view item_sep, std::string_view key_sep);

}  // namespace tandem::tmpl::detail
