#include "coordinator/chat_template/evaluator.h"

#include "coordinator/chat_template/builtins.h"
#include "coordinator/chat_template/errors.h"
#include "coordinator/chat_template/value_ops.h"

namespace ds::jinja {

Text Evaluator::render(const Program& prog, const std::vector<std::pair<std::string, Value>>& globals) {
  frames_.assign(1, Frame{});
  cur_ = 0;
  for (const auto& [k, v] : globals) frames_[0].vars[k] = v;
  out_.assign(1, Text());
  call_depth_ = 0;
  iterations_ = 0;
  exec(prog.body);
  return std::move(out_.back());
}

// ---- scopes and output -------------------------------------------------------------------

size_t Evaluator::push_frame(size_t parent) {
  const size_t restore = cur_;
  frames_.push_back(Frame{{}, parent});
  cur_ = frames_.size() - 1;
  return restore;
}

void Evaluator::pop_frame(size_t restore) {
  frames_.pop_back();
  cur_ = restore;
}

Value Evaluator::lookup(const std::string& name) const {
  for (size_t f = cur_;; f = frames_[f].parent) {
    auto it = frames_[f].vars.find(name);
    if (it != frames_[f].vars.end()) return it->second;
    if (f == 0) return {};
  }
}

void Evaluator::emit(const Text& t) {
  Text& out = out_.back();
  if (out.size() + t.size() > limits_.max_output_bytes) {
    throw EvalError("output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out.append(t);
}

Text Evaluator::capture(const Body& body) {
  out_.emplace_back();
  exec(body);
  Text t = std::move(out_.back());
  out_.pop_back();
  return t;
}

void Evaluator::count_iteration() {
  if (++iterations_ > limits_.max_loop_iterations) {
    throw EvalError("loop iteration limit (" + std::to_string(limits_.max_loop_iterations) + ") exceeded");
  }
}

// ---- statements ------------------------------------------------------------------------------

Evaluator::Flow Evaluator::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow f = exec_stmt(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s) {
  try {
    return exec_stmt_inner(s);
  } catch (const EvalError& e) {
    throw TemplateError(format_error(s.pos, e.what()));
  }
}

Evaluator::Flow Evaluator::exec_stmt_inner(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::kText:
      emit(Text::trusted(static_cast<const TextStmt&>(s).text));
      break;
    case StmtKind::kOutput:
      emit(to_text(eval(*static_cast<const OutputStmt&>(s).expr)));
      break;
    case StmtKind::kIf:
      return exec_if(static_cast<const IfStmt&>(s));
    case StmtKind::kFor:
      exec_for(static_cast<const ForStmt&>(s));
      break;
    case StmtKind::kSet:
      exec_set(static_cast<const SetStmt&>(s));
      break;
    case StmtKind::kMacro: {
      const auto& m = static_cast<const MacroStmt&>(s);
      assign(m.name, Value::callable(m.name, [this, &m](CallArgs& a) { return call_macro(m, a); }));
      break;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope:
      return exec(static_cast<const ScopeStmt&>(s).body);
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_if(const IfStmt& s) {
  for (const auto& [cond, body] : s.branches) {
    if (eval(*cond).truthy()) return exec(body);
  }
  return exec(s.else_body);
}

void Evaluator::bind_targets(const std::vector<std::string>& targets, const Value& item) {
  if (targets.size() == 1) {
    assign(targets[0], item);
    return;
  }
  if (!item.is_list() || item.as_list().size() != targets.size()) {
    throw EvalError("cannot unpack " + std::string(item.type_name()) + " into " + std::to_string(targets.size()) +
                    " loop variables");
  }
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], item.as_list()[i]);
}

void Evaluator::exec_for(const ForStmt& s) {
  List items = iteration_items(eval(*s.iter));
  const size_t restore = push_frame(cur_);
  if (s.filter) {  // `for x in y if cond`: loop.* counts only the kept items
    List kept;
    for (Value& item : items) {
      count_iteration();
      bind_targets(s.targets, item);
      if (eval(*s.filter).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    count_iteration();
    const auto k = static_cast<size_t>(i);
    bind_targets(s.targets, items[k]);
    Value loop = Value::dict();
    Dict& d = loop.as_dict();
    d.set(Text::trusted("index0"), Value::integer(i));
    d.set(Text::trusted("index"), Value::integer(i + 1));
    d.set(Text::trusted("revindex0"), Value::integer(n - i - 1));
    d.set(Text::trusted("revindex"), Value::integer(n - i));
    d.set(Text::trusted("first"), Value::boolean(i == 0));
    d.set(Text::trusted("last"), Value::boolean(i == n - 1));
    d.set(Text::trusted("length"), Value::integer(n));
    d.set(Text::trusted("depth"), Value::integer(1));
    d.set(Text::trusted("depth0"), Value::integer(0));
    if (i > 0) d.set(Text::trusted("previtem"), items[k - 1]);
    if (i + 1 < n) d.set(Text::trusted("nextitem"), items[k + 1]);
    d.set(Text::trusted("cycle"), Value::callable("cycle", [i](CallArgs& a) {
            if (a.positional.empty()) throw EvalError("cycle(): no items");
            return a.positional[static_cast<size_t>(i) % a.positional.size()];
          }));
    assign("loop", std::move(loop));
    if (exec(s.body) == Flow::kBreak) break;
  }
  pop_frame(restore);
  if (n == 0) exec(s.else_body);
}

void Evaluator::exec_set(const SetStmt& s) {
  Value v = s.value ? eval(*s.value) : Value::string(capture(s.block));
  if (s.attr.empty()) {
    assign(s.name, std::move(v));
    return;
  }
  Value target = lookup(s.name);
  if (!target.is_namespace()) {
    throw EvalError("cannot assign attribute on non-namespace object '" + s.name + "'");
  }
  target.as_namespace().attrs.set(Text::trusted(s.attr), std::move(v));
}

Value Evaluator::call_macro(const MacroStmt& m, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    throw EvalError("macro call depth limit (" + std::to_string(limits_.max_call_depth) + ") exceeded");
  }
  if (args.positional.size() > m.params.size()) {
    throw EvalError("macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments");
  }
  // Macros see the template's globals, not the caller's locals.
  const size_t restore = push_frame(0);
  ++call_depth_;
  for (const auto& [name, v] : args.named) {
    bool known = false;
    for (const auto& p : m.params) known = known || p.first == name;
    if (!known) throw EvalError("macro '" + m.name + "' got an unexpected keyword argument '" + name + "'");
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    const auto& [name, def] = m.params[i];
    Value v;
    if (i < args.positional.size()) v = args.positional[i];
    for (const auto& [k, x] : args.named) {
      if (k == name) v = x;
    }
    if (v.is_undefined() && def) v = eval(*def);  // defaults may use earlier parameters
    assign(name, std::move(v));
  }
  Text out = capture(m.body);
  --call_depth_;
  pop_frame(restore);
  return Value::string(std::move(out));
}

// ---- expressions ---------------------------------------------------------------------------

Value Evaluator::eval(const Expr& e) {
  try {
    return eval_inner(e);
  } catch (const EvalError& err) {
    throw TemplateError(format_error(e.pos, err.what()));  // innermost position wins
  }
}

Value Evaluator::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::kName:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::kAttr: {
      const auto& a = static_cast<const AttrExpr&>(e);
      return get_attr(eval(*a.obj), a.name);
    }
    case ExprKind::kIndex: {
      const auto& x = static_cast<const IndexExpr&>(e);
      Value obj = eval(*x.obj);
      return get_item(obj, eval(*x.index));
    }
    case ExprKind::kSlice:
      return eval_slice(static_cast<const SliceExpr&>(e));
    case ExprKind::kCall:
      return eval_call(static_cast<const CallExpr&>(e));
    case ExprKind::kFilter:
      return eval_filter(static_cast<const FilterExpr&>(e));
    case ExprKind::kTest:
      return eval_test(static_cast<const FilterExpr&>(e));
    case ExprKind::kUnary: {
      const auto& u = static_cast<const UnaryExpr&>(e);
      Value v = eval(*u.operand);
      if (u.op == UnaryOp::kNot) return Value::boolean(!v.truthy());
      if (u.op == UnaryOp::kNeg) return negate(v);
      if (!v.is_number()) throw EvalError("bad operand type for unary +");
      return v;
    }
    case ExprKind::kBinary:
      return eval_binary(static_cast<const BinaryExpr&>(e));
    case ExprKind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::kCond: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (eval(*c.cond).truthy()) return eval(*c.then_expr);
      return c.else_expr ? eval(*c.else_expr) : Value();
    }
    case ExprKind::kList: {
      List items;
      for (const ExprPtr& x : static_cast<const ListExpr&>(e).items) items.push_back(eval(*x));
      return Value::list(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::dict();
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k);
        if (!key.is_string()) throw EvalError("dict literal keys must be strings");
        d.as_dict().set(key.as_text(), eval(*v));
      }
      return d;
    }
  }
  return {};
}

Value Evaluator::eval_binary(const BinaryExpr& e) {
  Value l = eval(*e.lhs);
  // and/or short-circuit and return an operand, as in Python.
  if (e.op == BinOp::kAnd) return l.truthy() ? eval(*e.rhs) : l;
  if (e.op == BinOp::kOr) return l.truthy() ? l : eval(*e.rhs);
  Value r = eval(*e.rhs);
  return binary_op(e.op, l, r, limits_.max_output_bytes);
}

Value Evaluator::eval_compare(const CompareExpr& e) {
  Value l = eval(*e.first);
  for (const auto& [op, rhs] : e.rest) {
    Value r = eval(*rhs);
    if (!compare_op(op, l, r)) return Value::boolean(false);
    l = std::move(r);
  }
  return Value::boolean(true);
}

CallArgs Evaluator::eval_args(const Args& a) {
  CallArgs out;
  for (const ExprPtr& x : a.positional) out.positional.push_back(eval(*x));
  for (const auto& [k, x] : a.named) out.named.emplace_back(k, eval(*x));
  return out;
}

Value Evaluator::eval_call(const CallExpr& e) {
  Value callee = eval(*e.callee);
  CallArgs args = eval_args(e.args);
  if (!callee.is_callable()) {
    std::string what = "object";
    if (e.callee->kind == ExprKind::kName) what = "'" + static_cast<const NameExpr&>(*e.callee).name + "'";
    if (e.callee->kind == ExprKind::kAttr) what = "'" + static_cast<const AttrExpr&>(*e.callee).name + "'";
    throw EvalError(what + " is " + (callee.is_undefined() ? "undefined" : "not callable"));
  }
  return callee.as_callable().fn(args);
}

Value Evaluator::eval_filter(const FilterExpr& e) {
  Value v = eval(*e.operand);
  CallArgs args = eval_args(e.args);
  FilterFn f = find_filter(e.name);
  if (f == nullptr) throw EvalError("no filter named '" + e.name + "'");
  return f(v, args, limits_);
}

Value Evaluator::eval_test(const FilterExpr& e) {
  Value v = eval(*e.operand);
  CallArgs args = eval_args(e.args);
  TestFn t = find_test(e.name);
  if (t == nullptr) throw EvalError("no test named '" + e.name + "'");
  return Value::boolean(t(v, args) != e.negated);
}

Value Evaluator::eval_slice(const SliceExpr& e) {
  Value obj = eval(*e.obj);
  Value start = e.start ? eval(*e.start) : Value();
  Value stop = e.stop ? eval(*e.stop) : Value();
  Value step = e.step ? eval(*e.step) : Value();
  return get_slice(obj, start, stop, step);
}

}  // namespace ds::jinja
