#include "coordinator/chat_template/parser.h"

#include <set>

#include "coordinator/chat_template/builtins.h"
#include "coordinator/chat_template/errors.h"

namespace ds::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_nesting) : t_(std::move(toks)), max_nesting_(max_nesting) {}

  std::unique_ptr<Program> run() {
    auto prog = std::make_unique<Program>();
    std::string end;
    prog->body = parse_body({}, end);
    return prog;
  }

 private:
  // ---- token helpers -------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& next_tok() {
    const Token& t = t_[i_];
    if (t.type != Tok::kEof) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected a name, got " + describe(cur()));
    return next_tok().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail("expected '%}', got " + describe(cur()));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof:
        return "end of template";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kString:
        return "string literal";
      case Tok::kText:
        return "template text";
      default:
        return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().pos, msg); }
  [[noreturn]] static void fail_at(Pos p, const std::string& msg) { throw TemplateError(format_error(p, msg)); }

  struct DepthGuard {
    DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > p_.max_nesting_) p_.fail("template nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // ---- statements ------------------------------------------------------------------------
  // Parses until one of the `enders` block tags; its name is returned in `end` (the tag
  // itself is consumed up to its name, the caller parses the rest).
  Body parse_body(const std::set<std::string>& enders, std::string& end) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (!enders.empty()) fail("unexpected end of template, expected '" + *enders.begin() + "'");
        return body;
      }
      if (t.type == Tok::kText) {
        body.push_back(std::make_unique<TextStmt>(t.pos, t.text));
        ++i_;
      } else if (t.type == Tok::kVarBegin) {
        ++i_;
        auto e = parse_tuple(true);
        if (cur().type != Tok::kVarEnd) fail("expected '}}', got " + describe(cur()));
        ++i_;
        body.push_back(std::make_unique<OutputStmt>(t.pos, std::move(e)));
      } else if (t.type == Tok::kBlockBegin) {
        ++i_;
        if (cur().type == Tok::kName && enders.count(cur().text)) {
          end = next_tok().text;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const Pos p = cur().pos;
    if (cur().type != Tok::kName) fail("expected a statement name, got " + describe(cur()));
    const std::string kw = next_tok().text;
    if (kw == "if") return parse_if(p);
    if (kw == "for") return parse_for(p);
    if (kw == "set") return parse_set(p);
    if (kw == "macro") return parse_macro(p);
    if (kw == "generation") return parse_scope(p);
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) fail_at(p, "'" + kw + "' outside of a loop");
      expect_block_end();
      return std::make_unique<Stmt>(kw == "break" ? StmtKind::kBreak : StmtKind::kContinue, p);
    }
    i_--;
    fail("unknown or unsupported tag '" + kw + "'");
  }

  StmtPtr parse_if(Pos p) {
    auto s = std::make_unique<IfStmt>(p);
    std::string end = "elif";
    while (end == "elif") {
      auto cond = parse_expression(true);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"}, end);
      s->branches.emplace_back(std::move(cond), std::move(body));
    }
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_for(Pos p) {
    auto s = std::make_unique<ForStmt>(p);
    do {
      s->targets.push_back(expect_name());
    } while (accept_op(","));
    if (!accept_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    s->iter = parse_tuple(false);  // no conditional expression: `if` filters the loop
    if (accept_name("if")) s->filter = parse_expression(true);
    if (accept_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"}, end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(Pos p) {
    auto s = std::make_unique<SetStmt>(p);
    s->name = expect_name();
    if (accept_op(".")) s->attr = expect_name();
    if (is_op(",")) fail("tuple unpacking in 'set' is not supported");
    if (accept_op("=")) {
      s->value = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (!s->attr.empty()) fail("expected '='");
    expect_block_end();
    std::string end;
    s->block = parse_body({"endset"}, end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(Pos p) {
    auto s = std::make_unique<MacroStmt>(p);
    s->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      std::string param = expect_name();
      ExprPtr def;
      if (accept_op("=")) def = parse_expression(true);
      s->params.emplace_back(std::move(param), std::move(def));
      if (!accept_op(",")) break;
    }
    expect_op(")");
    expect_block_end();
    std::string end;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"}, end);
    loop_depth_ = saved_loops;
    if (cur().type == Tok::kName) ++i_;  // optional macro name after endmacro
    expect_block_end();
    return s;
  }

  StmtPtr parse_scope(Pos p) {
    auto s = std::make_unique<ScopeStmt>(p);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endgeneration"}, end);
    expect_block_end();
    return s;
  }

  // ---- expressions ------------------------------------------------------------------------
  // `a, b` without brackets forms a tuple (as in Jinja's parse_tuple).
  ExprPtr parse_tuple(bool with_condexpr) {
    const Pos p = cur().pos;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto list = std::make_unique<ListExpr>(p);
    list->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (at_expression_end()) break;
      list->items.push_back(parse_expression(with_condexpr));
    }
    return list;
  }

  bool at_expression_end() const {
    const Tok t = cur().type;
    return t == Tok::kVarEnd || t == Tok::kBlockEnd || is_op(")") || is_op("]") || is_op("}") || is_name("if");
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      auto c = std::make_unique<CondExpr>(next_tok().pos);
      c->then_expr = std::move(e);
      c->cond = parse_or();
      if (accept_name("else")) c->else_expr = parse_expression(true);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Pos p = next_tok().pos;
      l = std::make_unique<BinaryExpr>(p, BinOp::kOr, std::move(l), parse_and());
    }
    return l;
  }

  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Pos p = next_tok().pos;
      l = std::make_unique<BinaryExpr>(p, BinOp::kAnd, std::move(l), parse_not());
    }
    return l;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const Pos p = next_tok().pos;
      return std::make_unique<UnaryExpr>(p, UnaryOp::kNot, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Pos p = cur().pos;
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    for (;;) {
      CmpOp op;
      if (accept_op("==")) {
        op = CmpOp::kEq;
      } else if (accept_op("!=")) {
        op = CmpOp::kNe;
      } else if (accept_op("<")) {
        op = CmpOp::kLt;
      } else if (accept_op("<=")) {
        op = CmpOp::kLe;
      } else if (accept_op(">")) {
        op = CmpOp::kGt;
      } else if (accept_op(">=")) {
        op = CmpOp::kGe;
      } else if (accept_name("in")) {
        op = CmpOp::kIn;
      } else if (is_name("not") && t_[i_ + 1].type == Tok::kName && t_[i_ + 1].text == "in") {
        i_ += 2;
        op = CmpOp::kNotIn;
      } else {
        break;
      }
      if (!cmp) cmp = std::make_unique<CompareExpr>(p, std::move(first));
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return first;
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    for (;;) {
      const Pos p = cur().pos;
      if (accept_op("+")) {
        l = std::make_unique<BinaryExpr>(p, BinOp::kAdd, std::move(l), parse_concat());
      } else if (accept_op("-")) {
        l = std::make_unique<BinaryExpr>(p, BinOp::kSub, std::move(l), parse_concat());
      } else {
        return l;
      }
    }
  }

  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Pos p = next_tok().pos;
      l = std::make_unique<BinaryExpr>(p, BinOp::kConcat, std::move(l), parse_math2());
    }
    return l;
  }

  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    for (;;) {
      const Pos p = cur().pos;
      BinOp op;
      if (accept_op("*")) {
        op = BinOp::kMul;
      } else if (accept_op("/")) {
        op = BinOp::kDiv;
      } else if (accept_op("//")) {
        op = BinOp::kFloorDiv;
      } else if (accept_op("%")) {
        op = BinOp::kMod;
      } else {
        return l;
      }
      l = std::make_unique<BinaryExpr>(p, op, std::move(l), parse_pow());
    }
  }

  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Pos p = next_tok().pos;
      l = std::make_unique<BinaryExpr>(p, BinOp::kPow, std::move(l), parse_unary(true));
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Pos p = cur().pos;
    ExprPtr node;
    if (accept_op("-")) {
      node = std::make_unique<UnaryExpr>(p, UnaryOp::kNeg, parse_unary(false));
    } else if (accept_op("+")) {
      node = std::make_unique<UnaryExpr>(p, UnaryOp::kPos, parse_unary(false));
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const Pos p = t.pos;
    switch (t.type) {
      case Tok::kName: {
        const std::string n = next_tok().text;
        if (n == "true" || n == "True") return std::make_unique<LiteralExpr>(p, Value::boolean(true));
        if (n == "false" || n == "False") return std::make_unique<LiteralExpr>(p, Value::boolean(false));
        if (n == "none" || n == "None") return std::make_unique<LiteralExpr>(p, Value::none());
        return std::make_unique<NameExpr>(p, n);
      }
      case Tok::kString: {
        std::string s;
        while (cur().type == Tok::kString) s += next_tok().text;  // adjacent literals join
        return std::make_unique<LiteralExpr>(p, Value::trusted(std::move(s)));
      }
      case Tok::kInt:
        return std::make_unique<LiteralExpr>(p, Value::integer(next_tok().int_value));
      case Tok::kFloat:
        return std::make_unique<LiteralExpr>(p, Value::number(next_tok().float_value));
      default:
        break;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return std::make_unique<ListExpr>(p);  // empty tuple
      ExprPtr e = parse_tuple(true);
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      auto l = std::make_unique<ListExpr>(p);
      while (!is_op("]")) {
        l->items.push_back(parse_expression(true));
        if (!accept_op(",")) break;
      }
      expect_op("]");
      return l;
    }
    if (accept_op("{")) {
      auto d = std::make_unique<DictExpr>(p);
      while (!is_op("}")) {
        ExprPtr k = parse_expression(true);
        expect_op(":");
        d->items.emplace_back(std::move(k), parse_expression(true));
        if (!accept_op(",")) break;
      }
      expect_op("}");
      return d;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      const Pos p = cur().pos;
      if (accept_op(".")) {
        if (cur().type == Tok::kInt) {  // `x.0` means x[0] in Jinja
          node = std::make_unique<IndexExpr>(p, std::move(node),
                                             std::make_unique<LiteralExpr>(p, Value::integer(next_tok().int_value)));
        } else {
          node = std::make_unique<AttrExpr>(p, std::move(node), expect_name());
        }
      } else if (accept_op("[")) {
        node = parse_subscript(p, std::move(node));
      } else if (is_op("(")) {
        auto c = std::make_unique<CallExpr>(p, std::move(node));
        c->args = parse_args();
        node = std::move(c);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(Pos p, ExprPtr obj) {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (accept_op("]")) return std::make_unique<IndexExpr>(p, std::move(obj), std::move(start));
    }
    auto s = std::make_unique<SliceExpr>(p);
    s->obj = std::move(obj);
    s->start = std::move(start);
    expect_op(":");
    if (!is_op(":") && !is_op("]")) s->stop = parse_expression(true);
    if (accept_op(":") && !is_op("]")) s->step = parse_expression(true);
    expect_op("]");
    return s;
  }

  Args parse_args() {
    Args a;
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == Tok::kName && t_[i_ + 1].type == Tok::kOp && t_[i_ + 1].text == "=") {
        std::string n = next_tok().text;
        ++i_;
        a.named.emplace_back(std::move(n), parse_expression(true));
      } else {
        if (!a.named.empty()) fail("positional argument after keyword argument");
        a.positional.push_back(parse_expression(true));
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
    return a;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      if (is_op("|")) {
        const Pos p = next_tok().pos;
        if (cur().type == Tok::kName && find_filter(cur().text) == nullptr) fail("unknown filter '" + cur().text + "'");
        auto f = std::make_unique<FilterExpr>(ExprKind::kFilter, p, std::move(node), expect_name());
        if (is_op("(")) f->args = parse_args();
        node = std::move(f);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        auto c = std::make_unique<CallExpr>(cur().pos, std::move(node));
        c->args = parse_args();
        node = std::move(c);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    const Pos p = next_tok().pos;  // 'is'
    const bool negated = accept_name("not");
    if (cur().type == Tok::kName && find_test(cur().text) == nullptr) fail("unknown test '" + cur().text + "'");
    auto t = std::make_unique<FilterExpr>(ExprKind::kTest, p, std::move(node), expect_name());
    t->negated = negated;
    if (is_op("(")) {
      t->args = parse_args();
    } else if (takes_bare_test_arg()) {
      // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses.
      t->args.positional.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  bool takes_bare_test_arg() const {
    const Token& t = cur();
    if (t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat) return true;
    if (t.type == Tok::kOp) return t.text == "[" || t.text == "{";
    if (t.type != Tok::kName) return false;
    return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" && t.text != "is" &&
           t.text != "in" && t.text != "not";
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int max_nesting_;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse_template(const std::string& source, int max_nesting) {
  return Parser(lex_template(source), max_nesting).run();
}

}  // namespace ds::jinja
