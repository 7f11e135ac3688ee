#include "evaluator.hpp"

#include <cmath>
#include <limits>

#include "error.hpp"
#include "filters.hpp"

namespace tandem::tmpl::detail {

namespace {
constexpr int kMaxCallDepth = 100;  // recursive macros fail cleanly instead of exhausting the stack

std::string py_type_of(const Value& v) {
  std::string t = type_name(v);
  auto sp = t.find(" object");
  return sp == std::string::npos ? t : t.substr(0, sp);
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("unsupported operand type(s) for " + op + ": '" + py_type_of(a) + "' and '" + py_type_of(b) + "'");
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }
std::int64_t int_of(const Value& v) { return v.is_bool() ? static_cast<std::int64_t>(v.as_bool()) : v.as_int(); }
bool is_num(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }

Value repeat(const Value& seq, std::int64_t n) {
  constexpr std::size_t kMax = std::size_t{16} << 20;
  if (n <= 0) return seq.is_string() ? Value(std::string()) : make_list();
  auto count = static_cast<std::size_t>(n);
  std::size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list()->size();
  if (unit != 0 && count > kMax / unit) fail("sequence repetition too large");
  if (seq.is_string()) {
    std::string out;
    for (std::size_t i = 0; i < count; ++i) out += seq.as_string();
    return out;
  }
  List out;
  for (std::size_t i = 0; i < count; ++i) out.insert(out.end(), seq.as_list()->begin(), seq.as_list()->end());
  return make_list(std::move(out));
}
}  // namespace

Evaluator::Evaluator(const Program& program, Value context) : program_(program) {
  auto globals = std::make_shared<Frame>();
  install_globals(*globals, program.options);
  if (context.is_dict())
    for (auto& [k, v] : context.as_dict()->items) globals->vars[k] = v;
  scopes_.push_back(std::move(globals));
  scopes_.push_back(std::make_shared<Frame>());  // the template's own top-level variables
}

Evaluator::~Evaluator() {
  for (auto& f : captured_) f->vars.clear();
  for (auto& f : scopes_) f->vars.clear();
}

std::string Evaluator::run() {
  exec(program_.body);
  return std::move(out_);
}

void Evaluator::write(const std::string& s) {
  out_ += s;
  if (out_.size() > program_.options.max_output_bytes) fail("output exceeds the size limit");
}

void Evaluator::count_iteration() {
  if (++iterations_ > program_.options.max_iterations) fail("too many loop iterations");
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = (*it)->vars.find(name);
    if (f != (*it)->vars.end()) return f->second;
  }
  return Undefined{"'" + name + "' is undefined"};
}

std::string Evaluator::capture(const Body& body) {
  std::string saved = std::move(out_);
  out_.clear();
  Flow flow = Flow::normal;
  try {
    flow = exec(body);
  } catch (...) {
    out_ = std::move(saved);
    throw;
  }
  (void)flow;
  std::string captured = std::move(out_);
  out_ = std::move(saved);
  return captured;
}

Evaluator::Flow Evaluator::exec(const Body& body) {
  for (const auto& n : body) {
    Flow f = exec(*n);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

Evaluator::Flow Evaluator::exec(const Node& n) {
  try {
    switch (n.kind) {
      case Node::Kind::text: write(n.text); break;
      case Node::Kind::output: write(to_str(eval(*n.expr))); break;
      case Node::Kind::if_: {
        for (const auto& [test, body] : n.branches)
          if (truthy(eval(*test))) return exec(body);
        return exec(n.else_body);
      }
      case Node::Kind::for_: exec_for(n); break;
      case Node::Kind::set: assign(*n.target, eval(*n.expr)); break;
      case Node::Kind::set_block: {
        Value text = capture(n.body);
        assign(*n.target, n.filters ? eval_filter_chain(*n.filters, text) : text);
        break;
      }
      case Node::Kind::macro: scopes_.back()->vars[n.text] = make_macro(n, n.params, n.body, n.text); break;
      case Node::Kind::call_block: {
        Value caller = make_macro(n, n.params, n.body, "caller");
        write(to_str(eval_call(*n.expr, &caller)));
        break;
      }
      case Node::Kind::filter_block: write(to_str(eval_filter_chain(*n.filters, capture(n.body)))); break;
      case Node::Kind::break_: return Flow::break_;
      case Node::Kind::continue_: return Flow::continue_;
      case Node::Kind::scope: return exec(n.body);
      case Node::Kind::do_: eval(*n.expr); break;
    }
  } catch (TemplateError& e) {
    e.set_pos(n.pos);
    throw;
  }
  return Flow::normal;
}

void Evaluator::exec_for(const Node& n) {
  Value iterable = eval(*n.expr);
  List items = iterate(iterable);
  auto frame = std::make_shared<Frame>();
  scopes_.push_back(frame);
  struct Pop {
    Scopes& s;
    ~Pop() { s.pop_back(); }
  } pop{scopes_};
  if (n.test) {  // `for x in xs if cond`: filter first, so loop.length counts what remains
    List kept;
    for (auto& item : items) {
      count_iteration();
      assign(*n.target, item);
      if (truthy(eval(*n.test))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const auto len = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < len; ++i) {
    count_iteration();
    frame->vars.clear();
    assign(*n.target, items[static_cast<std::size_t>(i)]);
    Value loop = make_dict(Dict::Kind::loop);
    Dict& d = *loop.as_dict();
    d.items.reserve(12);
    d.items.emplace_back("index", i + 1);
    d.items.emplace_back("index0", i);
    d.items.emplace_back("revindex", len - i);
    d.items.emplace_back("revindex0", len - i - 1);
    d.items.emplace_back("first", i == 0);
    d.items.emplace_back("last", i == len - 1);
    d.items.emplace_back("length", len);
    d.items.emplace_back("depth", 1);
    d.items.emplace_back("depth0", 0);
    d.items.emplace_back("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)]
                                           : Value(Undefined{"there is no previous item"}));
    d.items.emplace_back("nextitem", i + 1 < len ? items[static_cast<std::size_t>(i + 1)]
                                                 : Value(Undefined{"there is no next item"}));
    d.items.emplace_back("cycle", make_func("loop.cycle", [i](CallArgs& a) -> Value {
      if (a.args.empty()) fail("no items for cycling given");
      return a.args[static_cast<std::size_t>(i) % a.args.size()];
    }));
    frame->vars["loop"] = std::move(loop);
    if (exec(n.body) == Flow::break_) break;
  }
  if (len == 0) {
    frame->vars.clear();
    exec(n.else_body);
  }
}

void Evaluator::assign(const Expr& target, const Value& value) {
  switch (target.kind) {
    case Expr::Kind::name: scopes_.back()->vars[target.name] = value; return;
    case Expr::Kind::tuple: {
      List items = iterate(value);
      if (items.size() != target.children.size())
        fail("cannot unpack " + std::to_string(items.size()) + " values into " +
             std::to_string(target.children.size()) + " names");
      for (std::size_t i = 0; i < items.size(); ++i) assign(*target.children[i], items[i]);
      return;
    }
    case Expr::Kind::getattr: {
      Value obj = eval(*target.children[0]);
      if (!obj.is_dict() || obj.as_dict()->kind != Dict::Kind::namespace_)
        fail("cannot assign attribute '" + target.name + "' on " + type_name(obj) +
             " (only namespace() objects accept attribute assignment)", target.pos);
      obj.as_dict()->set(target.name, value);
      return;
    }
    default: fail("cannot assign to this expression", target.pos);
  }
}

// Macros and call-block callers: closures over the scopes visible where they are defined. The
// scopes are shared, so a macro sees later top-level assignments, as jinja2's context does.
Value Evaluator::make_macro(const Node& node, const std::vector<Param>& params, const Body& body,
                            const std::string& name) {
  Scopes closure = scopes_;
  captured_.insert(captured_.end(), closure.begin(), closure.end());
  const Node* where = &node;
  return make_func(name, [this, closure, &params, &body, name, where](CallArgs& a) -> Value {
    if (call_depth_ >= kMaxCallDepth) fail("maximum macro recursion depth exceeded", where->pos);
    if (a.args.size() > params.size())
      fail("macro '" + name + "' takes " + std::to_string(params.size()) + " arguments (" +
           std::to_string(a.args.size()) + " given)");
    auto frame = std::make_shared<Frame>();
    Scopes saved = std::move(scopes_);
    scopes_ = closure;
    scopes_.push_back(frame);
    ++call_depth_;
    struct Restore {
      Evaluator& ev;
      Scopes& saved;
      ~Restore() {
        ev.scopes_ = std::move(saved);
        --ev.call_depth_;
      }
    } restore{*this, saved};
    for (const auto& [k, v] : a.kwargs) {
      bool known = k == "caller";
      for (const auto& p : params) known = known || p.name == k;
      if (!known) fail("macro '" + name + "' takes no keyword argument '" + k + "'");
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Param& p = params[i];
      Value v = a.get(i, p.name, Undefined{"parameter '" + p.name + "' was not provided"});
      if (v.is_undefined() && p.default_value && !a.has(i, p.name)) v = eval(*p.default_value);
      frame->vars[p.name] = std::move(v);
    }
    for (const auto& [k, v] : a.kwargs)
      if (k == "caller") frame->vars["caller"] = v;
    return capture(body);
  });
}

Value Evaluator::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (TemplateError& err) {
    err.set_pos(e.pos);
    throw;
  }
}

CallArgs Evaluator::eval_args(const Expr& e) {
  CallArgs a;
  for (const auto& x : e.args) a.args.push_back(eval(*x));
  for (const auto& [k, x] : e.kwargs) a.kwargs.emplace_back(k, eval(*x));
  return a;
}

Value Evaluator::eval_call(const Expr& call, const Value* caller) {
  Value fn = eval(*call.children[0]);
  CallArgs a = eval_args(call);
  if (caller) a.kwargs.emplace_back("caller", *caller);
  if (fn.is_undefined()) fail(undefined_message(fn), call.children[0]->pos);
  if (!fn.is_func()) fail("'" + type_name(fn) + "' is not callable");
  return fn.as_func()->call(a);
}

Value Evaluator::eval_filter_chain(const Expr& f, const Value& block_input) {
  // The innermost input of a {% filter %} / block-set chain is the captured text (null child).
  const Expr* inner = f.children[0].get();
  Value input = !inner ? block_input
                : inner->kind == Expr::Kind::filter ? eval_filter_chain(*inner, block_input)
                                                    : eval(*inner);
  CallArgs a = eval_args(f);
  try {
    return apply_filter(f.name, input, a);
  } catch (TemplateError& err) {
    err.set_pos(f.pos);
    throw;
  }
}

Value Evaluator::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::literal: return e.value;
    case Expr::Kind::name: return lookup(e.name);
    case Expr::Kind::list:
    case Expr::Kind::tuple: {
      List items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) items.push_back(eval(*c));
      return make_list(std::move(items));
    }
    case Expr::Kind::dict: {
      Value d = make_dict();
      for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) {
        Value k = eval(*e.children[i]);
        d.as_dict()->set(to_str(k), eval(*e.children[i + 1]));
      }
      return d;
    }
    case Expr::Kind::unary: {
      Value v = eval(*e.children[0]);
      if (e.name == "not") return !truthy(v);
      if (v.is_undefined()) fail_undefined(v);
      if (!is_num(v)) fail("bad operand type for unary " + e.name + ": '" + py_type_of(v) + "'");
      if (e.name == "+") return v.is_bool() ? Value(int_of(v)) : v;
      if (v.is_float()) return -v.as_float();
      if (int_of(v) == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
      return -int_of(v);
    }
    case Expr::Kind::binary: return eval_binary(e);
    case Expr::Kind::cond: {
      if (truthy(eval(*e.children[1]))) return eval(*e.children[0]);
      if (e.children[2]) return eval(*e.children[2]);
      return Undefined{"the inline if expression evaluated to false and has no else"};
    }
    case Expr::Kind::getattr: {
      Value obj = eval(*e.children[0]);
      if (obj.is_undefined()) fail(undefined_message(obj), e.children[0]->pos);
      return get_attribute(obj, e.name);
    }
    case Expr::Kind::getitem: {
      Value obj = eval(*e.children[0]);
      if (obj.is_undefined()) fail(undefined_message(obj), e.children[0]->pos);
      const Expr& key = *e.children[1];
      if (key.kind == Expr::Kind::slice) {
        auto part = [&](std::size_t i) { return key.children[i] ? eval(*key.children[i]) : Value(None{}); };
        return slice(obj, part(0), part(1), part(2));
      }
      return get_item(obj, eval(key));
    }
    case Expr::Kind::slice: fail("slice outside a subscript");
    case Expr::Kind::call: return eval_call(e, nullptr);
    case Expr::Kind::filter: return eval_filter_chain(e, Value{});
    case Expr::Kind::test: {
      Value v = eval(*e.children[0]);
      CallArgs a = eval_args(e);
      bool r = apply_test(e.name, v, a);
      return e.negated ? !r : r;
    }
  }
  fail("unknown expression");
}

Value Evaluator::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value l = eval(*e.children[0]);
    return truthy(l) ? eval(*e.children[1]) : l;
  }
  if (op == "or") {
    Value l = eval(*e.children[0]);
    return truthy(l) ? l : eval(*e.children[1]);
  }
  Value a = eval(*e.children[0]);
  Value b = eval(*e.children[1]);
  if (op == "~") return to_str(a) + to_str(b);
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  if (op == ">=") return !less(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return a.as_string() + b.as_string();
    if (a.is_list() && b.is_list()) {
      List out = *a.as_list();
      out.insert(out.end(), b.as_list()->begin(), b.as_list()->end());
      return make_list(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(a, int_of(b));
    if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(b, int_of(a));
  }
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  if (!is_num(a) || !is_num(b)) bad_operands(op, a, b);
  if (is_intlike(a) && is_intlike(b)) {
    std::int64_t x = int_of(a), y = int_of(b), r = 0;
    if (op == "+") { if (__builtin_add_overflow(x, y, &r)) fail("integer overflow"); return r; }
    if (op == "-") { if (__builtin_sub_overflow(x, y, &r)) fail("integer overflow"); return r; }
    if (op == "*") { if (__builtin_mul_overflow(x, y, &r)) fail("integer overflow"); return r; }
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) fail("integer overflow");
      std::int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) { --q; m += y; }  // Python floors toward -infinity
      return op == "//" ? q : m;
    }
    if (op == "**" && y >= 0) {
      if (x == 0 || x == 1) return y == 0 ? 1 : x;
      if (x == -1) return y % 2 ? -1 : 1;
      std::int64_t acc = 1;  // |x| >= 2 overflows within 63 steps, so the loop is short
      for (std::int64_t k = 0; k < y; ++k)
        if (__builtin_mul_overflow(acc, x, &acc)) fail("integer overflow");
      return acc;
    }
  }
  double x = to_double(a), y = to_double(b);
  if (op == "+") return x + y;
  if (op == "-") return x - y;
  if (op == "*") return x * y;
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return x / y;
  }
  if (op == "//") {
    if (y == 0) fail("float floor division by zero");
    return std::floor(x / y);
  }
  if (op == "%") {
    if (y == 0) fail("float modulo");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return m;
  }
  if (op == "**") return std::pow(x, y);
  fail("unknown operator '" + op + "'");
}

}  // namespace tandem::tmpl::detail
