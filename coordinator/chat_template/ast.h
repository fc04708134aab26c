// Syntax tree of a parsed template. Nodes are plain structs tagged with a kind; the evaluator
// dispatches on the kind (no virtual eval) so the tree stays a passive, immutable description.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat_template/lexer.h"
#include "coordinator/chat_template/value.h"

namespace ds::jinja {

enum class ExprKind {
  kLiteral,
  kName,
  kAttr,
  kIndex,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCompare,
  kCond,
  kList,
  kDict
};

struct Expr {
  Expr(ExprKind k, Pos p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  ExprKind kind;
  Pos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
};

struct LiteralExpr : Expr {
  LiteralExpr(Pos p, Value v) : Expr(ExprKind::kLiteral, p), value(std::move(v)) {}
  Value value;  // literal strings are trusted Texts
};
struct NameExpr : Expr {
  NameExpr(Pos p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};
struct AttrExpr : Expr {
  AttrExpr(Pos p, ExprPtr o, std::string n) : Expr(ExprKind::kAttr, p), obj(std::move(o)), name(std::move(n)) {}
  ExprPtr obj;
  std::string name;
};
struct IndexExpr : Expr {
  IndexExpr(Pos p, ExprPtr o, ExprPtr i) : Expr(ExprKind::kIndex, p), obj(std::move(o)), index(std::move(i)) {}
  ExprPtr obj, index;
};
struct SliceExpr : Expr {
  explicit SliceExpr(Pos p) : Expr(ExprKind::kSlice, p) {}
  ExprPtr obj, start, stop, step;  // bounds may be null
};
struct CallExpr : Expr {
  CallExpr(Pos p, ExprPtr c) : Expr(ExprKind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  Args args;
};
// Filters (`x|f(a)`) and tests (`x is t(a)`, `x is not t`) share one node shape.
struct FilterExpr : Expr {
  FilterExpr(ExprKind k, Pos p, ExprPtr o, std::string n) : Expr(k, p), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Args args;
  bool negated = false;  // tests only
};

enum class UnaryOp { kNot, kNeg, kPos };
struct UnaryExpr : Expr {
  UnaryExpr(Pos p, UnaryOp o, ExprPtr e) : Expr(ExprKind::kUnary, p), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinOp { kAnd, kOr, kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
struct BinaryExpr : Expr {
  BinaryExpr(Pos p, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, p), op(o), lhs(std::move(l)), rhs(std::move(r)) {}
  BinOp op;
  ExprPtr lhs, rhs;
};

enum class CmpOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
// Chained comparison `a < b < c`, as in Python.
struct CompareExpr : Expr {
  CompareExpr(Pos p, ExprPtr f) : Expr(ExprKind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};
struct CondExpr : Expr {
  explicit CondExpr(Pos p) : Expr(ExprKind::kCond, p) {}
  ExprPtr cond, then_expr, else_expr;  // else may be null (-> undefined)
};
struct ListExpr : Expr {
  explicit ListExpr(Pos p) : Expr(ExprKind::kList, p) {}
  std::vector<ExprPtr> items;  // lists and tuples alike
};
struct DictExpr : Expr {
  explicit DictExpr(Pos p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

enum class StmtKind { kText, kOutput, kIf, kFor, kSet, kMacro, kBreak, kContinue, kScope };

struct Stmt {
  Stmt(StmtKind k, Pos p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  Pos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(Pos p, std::string t) : Stmt(StmtKind::kText, p), text(std::move(t)) {}
  std::string text;
};
struct OutputStmt : Stmt {
  OutputStmt(Pos p, ExprPtr e) : Stmt(StmtKind::kOutput, p), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {
  explicit IfStmt(Pos p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};
struct ForStmt : Stmt {
  explicit ForStmt(Pos p) : Stmt(StmtKind::kFor, p) {}
  std::vector<std::string> targets;
  ExprPtr iter;
  ExprPtr filter;  // `for x in y if cond`; may be null
  Body body, else_body;
};
struct SetStmt : Stmt {
  explicit SetStmt(Pos p) : Stmt(StmtKind::kSet, p) {}
  std::string name;
  std::string attr;  // non-empty for `set ns.attr = ...`
  ExprPtr value;     // null for the block form `{% set x %}...{% endset %}`
  Body block;
};
struct MacroStmt : Stmt {
  explicit MacroStmt(Pos p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};
// `{% generation %}...{% endgeneration %}` (transformers' assistant-mask extension):
// renders its body unchanged.
struct ScopeStmt : Stmt {
  explicit ScopeStmt(Pos p) : Stmt(StmtKind::kScope, p) {}
  Body body;
};

struct Program {
  Body body;
};

}  // namespace ds::jinja
