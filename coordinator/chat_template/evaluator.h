// Tree-walking evaluator. One Evaluator per render (not thread-safe; the Program is shared
// read-only). Scoping follows Jinja: `for` bodies and macro calls get their own frame, so a
// `set` inside a loop does not leak out; namespaces are references and do carry state out.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coordinator/chat_template/ast.h"
#include "coordinator/chat_template/limits.h"

namespace ds::jinja {

class Evaluator {
 public:
  explicit Evaluator(const Limits& limits) : limits_(limits) {}

  // Renders `prog` with `globals` in the outermost frame. Throws ds::TemplateError (with the
  // template position) or ds::TemplateRaise.
  Text render(const Program& prog, const std::vector<std::pair<std::string, Value>>& globals);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::unordered_map<std::string, Value> vars;
    size_t parent = 0;
  };

  Flow exec(const Body& body);
  Flow exec_stmt(const Stmt& s);
  Flow exec_stmt_inner(const Stmt& s);
  Flow exec_if(const IfStmt& s);
  void exec_for(const ForStmt& s);
  void exec_set(const SetStmt& s);
  Value call_macro(const MacroStmt& m, CallArgs& args);

  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_binary(const BinaryExpr& e);
  Value eval_compare(const CompareExpr& e);
  Value eval_call(const CallExpr& e);
  Value eval_filter(const FilterExpr& e);
  Value eval_test(const FilterExpr& e);
  Value eval_slice(const SliceExpr& e);
  CallArgs eval_args(const Args& a);

  void emit(const Text& t);
  Text capture(const Body& body);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) { frames_[cur_].vars[name] = std::move(v); }
  size_t push_frame(size_t parent);  // returns the frame to restore
  void pop_frame(size_t restore);
  void bind_targets(const std::vector<std::string>& targets, const Value& item);
  void count_iteration();

  const Limits& limits_;
  std::vector<Frame> frames_;
  size_t cur_ = 0;
  std::vector<Text> out_;  // output stack: macros and block-sets capture into their own buffer
  int call_depth_ = 0;
  uint64_t iterations_ = 0;
};

}  // namespace ds::jinja
