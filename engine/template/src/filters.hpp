// Filters ({{ x | name(args) }}) and tests ({% if x is name %}), looked up by name. The parser asks
// is_filter / is_test so that an unknown name is a syntax error at its position, as in jinja2.
#pragma once

#include <string_view>

#include "value.hpp"

namespace tandem::tmpl::detail {

bool is_filter(std::string_view name);
bool is_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
bool apply_test(std::string_view name, const Value& input, CallArgs& args);

// Attribute lookup with jinja2's order: methods of str/list/dict first, then dict items.
// Returns Undefined (with a hint) when neither exists.
Value get_attribute(const Value& obj, const std::string& name);
// Subscript obj[key]: items first, then attributes; negative list indexes count from the end.
Value get_item(const Value& obj, const Value& key);
// Python slicing obj[start:stop:step] of lists and strings (by code point).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// printf-style "%s" % args, as Python's str % operator and jinja2's format filter.
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace tandem::tmpl::detail
