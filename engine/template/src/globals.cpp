// Global functions every chat template may call: jinja2's range/namespace/dict/cycler-free set,
// plus transformers' raise_exception and strftime_now.
#include <ctime>

#include "error.hpp"
#include "evaluator.hpp"

namespace tandem::tmpl::detail {

void install_globals(Frame& frame, const Options& options) {
  frame.vars["range"] = make_func("range", [max = options.max_iterations](CallArgs& a) -> Value {
    std::int64_t start = 0, stop = 0, step = 1;
    auto num = [](const Value& v) -> std::int64_t {
      if (v.is_int()) return v.as_int();
      if (v.is_bool()) return v.as_bool();
      if (v.is_undefined()) fail_undefined(v);
      fail("range() expects integers, got " + type_name(v));
    };
    if (a.args.size() == 1) {
      stop = num(a.args[0]);
    } else if (a.args.size() == 2 || a.args.size() == 3) {
      start = num(a.args[0]);
      stop = num(a.args[1]);
      if (a.args.size() == 3) step = num(a.args[2]);
    } else {
      fail("range expected 1 to 3 arguments, got " + std::to_string(a.args.size()));
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    List out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= max) fail("range() too large");
      out.emplace_back(i);
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return make_list(std::move(out));
  });
  // namespace(a=1) / namespace(some_dict, a=1): the one object whose attributes a template may set.
  auto build = [](Dict::Kind kind) {
    return [kind](CallArgs& a) -> Value {
      Value ns = make_dict(kind);
      for (const Value& arg : a.args) {
        if (!arg.is_dict()) fail("expected a mapping as positional argument, got " + type_name(arg));
        for (const auto& [k, v] : arg.as_dict()->items) ns.as_dict()->set(k, v);
      }
      for (const auto& [k, v] : a.kwargs) ns.as_dict()->set(k, v);
      return ns;
    };
  };
  frame.vars["namespace"] = make_func("namespace", build(Dict::Kind::namespace_));
  frame.vars["dict"] = make_func("dict", build(Dict::Kind::plain));
  frame.vars["raise_exception"] = make_func("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateError(ErrorKind::raised, to_str(a.get(0, "message")));
  });
  frame.vars["strftime_now"] = make_func("strftime_now", [fixed = options.fixed_time](CallArgs& a) -> Value {
    std::time_t now = fixed ? static_cast<std::time_t>(*fixed) : std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::string fmt = to_str(a.get(0, "format"));
    if (fmt.empty()) return std::string();
    char buf[512];
    // The format is the template's own text (as in transformers); -Wformat-nonliteral cannot apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
#pragma GCC diagnostic pop
    if (n == 0) fail("strftime_now: format produced no output or is too long");
    return std::string(buf, n);
  });
}

}  // namespace tandem::tmpl::detail
