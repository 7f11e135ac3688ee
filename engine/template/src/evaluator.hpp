// Evaluator: walks the tree with a stack of scopes, writing output to a string. Scoping follows
// jinja2: a for loop body is its own scope (hence namespace() for values that must outlive an
// iteration); if blocks are not; macros close over the scopes where they were defined.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ast.hpp"

namespace tandem::tmpl::detail {

struct Frame {
  std::unordered_map<std::string, Value> vars;
};
using Scopes = std::vector<std::shared_ptr<Frame>>;

// Installs range, namespace, dict, raise_exception, strftime_now, ... into `frame`.
void install_globals(Frame& frame, const Options& options);

class Evaluator {
 public:
  Evaluator(const Program& program, Value context);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;
  std::string run();

 private:
  enum class Flow { normal, break_, continue_ };

  const Program& program_;
  Scopes scopes_;
  std::string out_;
  std::size_t iterations_ = 0;
  int call_depth_ = 0;
  // Frames a macro closed over. A macro stored in a frame it captured is a shared_ptr cycle; the
  // destructor empties these frames to break it.
  std::vector<std::shared_ptr<Frame>> captured_;

  Flow exec(const Body& body);
  Flow exec(const Node& node);
  void exec_for(const Node& node);
  void assign(const Expr& target, const Value& value);
  std::string capture(const Body& body);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_call(const Expr& call, const Value* caller);
  Value eval_filter_chain(const Expr& f, const Value& block_input);
  CallArgs eval_args(const Expr& e);

  Value lookup(const std::string& name) const;
  Value make_macro(const Node& node, std::vector<Param> const& params, const Body& body,
                   const std::string& name);
  void write(const std::string& s);
  void count_iteration();
};

}  // namespace tandem::tmpl::detail
