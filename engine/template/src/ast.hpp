// The syntax tree. Plain structs with a kind tag: the evaluator switches on kinds, so adding a
// node kind is one enum entry here, one parse rule, one evaluation case.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/template/jinja.hpp"
#include "value.hpp"

namespace tandem::tmpl::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,   // value
    name,      // name
    list,      // children
    tuple,     // children (evaluates to a list)
    dict,      // children: key, value, key, value, ...
    unary,     // name: "-", "+", "not"; children[0]
    binary,    // name: operator (+ - * / // % ** ~ and or in "not in" == != < <= > >=); children[0..1]
    cond,      // children: then, test, else (else may be null)
    getattr,   // children[0] . name
    getitem,   // children[0] [ children[1] ]
    slice,     // children: start, stop, step (each may be null)
    call,      // children[0] ( args, kwargs )
    filter,    // children[0] | name ( args, kwargs ); children[0] null in {% filter %} blocks
    test,      // children[0] is [not] name ( args ); negated
  };
  Kind kind;
  std::size_t pos = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> children;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  enum class Kind {
    text,       // text
    output,     // expr
    if_,        // branches (test, body); else_body
    for_,       // target, expr (iterable), test (filter, may be null), body, else_body
    set,        // target, expr
    set_block,  // target, body, filters (filter chain applied to the captured text, may be null)
    macro,      // text (name), params, body
    call_block, // expr (the call), params (caller's), body
    filter_block, // filters, body
    break_,
    continue_,
    scope,      // body ({% generation %} and {% block %}: rendered in place)
    do_,        // expr, evaluated for its side effect
  };
  Kind kind;
  std::size_t pos = 0;
  std::string text;
  ExprPtr target;
  ExprPtr expr;
  ExprPtr test;
  ExprPtr filters;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<Param> params;
};

// A parsed template: its tree and what error messages need.
struct Program {
  std::string name;
  std::string source;
  Body body;
  Options options;
};

}  // namespace tandem::tmpl::detail
