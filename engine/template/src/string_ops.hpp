// Python str operations with Python's edge cases (split() on whitespace runs, replace with an
// empty pattern, strip with a character set, find returning code-point indexes). Case mapping
// is ASCII-only; other letters pass through unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "value.hpp"

namespace tandem::tmpl::detail {

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, std::int64_t maxsplit,
                                  bool from_right);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, std::int64_t count);
std::string py_case(const std::string& s, const std::string& how);  // upper lower title capitalize swapcase
std::int64_t py_count(const std::string& s, const std::string& sub);
std::int64_t py_find(const std::string& s, const std::string& sub, bool from_right);
std::string py_format(const std::string& fmt, const CallArgs& args);  // "{} {0} {name}".format(...)
std::vector<std::string> py_splitlines(const std::string& s);
bool py_is(const std::string& s, const std::string& what);  // isdigit isalpha ...

}  // namespace tandem::tmpl::detail
