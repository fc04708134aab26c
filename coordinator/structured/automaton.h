// Byte-level automata for grammar-constrained decoding: an expression IR (bytes, sequence,
// alternation, bounded repetition, calls of other rules), its Thompson NFA, and a DFA whose
// alphabet is byte classes plus "call rule R" symbols. A rule of a grammar is one such DFA; a
// lexeme (string body, number, pattern) is a DFA without calls.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ds::structured {

// Thrown when a compile exceeds GrammarOptions' budget (states or time); the compiler turns it
// into a SchemaError naming "$budget".
struct BudgetExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ByteSet {
  std::array<uint64_t, 4> w{};
  void set(uint8_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  bool test(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void set_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.set_range(lo, hi);
    return s;
  }
};

struct Dfa;
struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

inline constexpr uint32_t kUnbounded = 0xffffffffu;

struct Expr {
  enum class Kind { Nothing, Empty, Bytes, Seq, Alt, Repeat, Call, Embed, Graph };
  // Graph: an explicit automaton whose edges are sub-expressions; node 0 is the start.
  struct Edge {
    int32_t from, to;
    ExprPtr e;
  };
  Kind kind = Kind::Empty;
  ByteSet bytes;                      // Bytes
  std::vector<ExprPtr> kids;          // Seq, Alt, Repeat (one kid)
  uint32_t min = 0, max = 0;          // Repeat; max may be kUnbounded
  int32_t rule = -1;                  // Call
  std::shared_ptr<const Dfa> dfa;     // Embed: a DFA spliced in
  int32_t n_nodes = 0;                // Graph
  std::vector<int32_t> accept_nodes;  // Graph
  std::vector<Edge> edges;            // Graph
};

ExprPtr e_nothing();
ExprPtr e_empty();
ExprPtr e_bytes(const ByteSet& s);
ExprPtr e_byte(uint8_t b);
ExprPtr e_lit(std::string_view s);
ExprPtr e_seq(std::vector<ExprPtr> kids);
ExprPtr e_alt(std::vector<ExprPtr> kids);
ExprPtr e_rep(ExprPtr e, uint32_t min, uint32_t max);
ExprPtr e_opt(ExprPtr e);
ExprPtr e_call(int32_t rule);
ExprPtr e_embed(std::shared_ptr<const Dfa> dfa);
ExprPtr e_graph(int32_t n_nodes, std::vector<int32_t> accept_nodes, std::vector<Expr::Edge> edges);

// A DFA over byte classes plus call edges. State 0 is the start. next[s * ncls + cls[b]] is
// the successor on byte b or -1.
struct Dfa {
  std::array<uint8_t, 256> cls{};
  int ncls = 1;
  std::vector<int32_t> next;
  std::vector<uint8_t> accept;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> calls;  // per state: (rule, target)
  bool trimmed = false;  // call-free, every state reachable and live (trim_dfa: nothing to do)

  size_t size() const { return accept.size(); }
  int32_t step(int32_t s, uint8_t b) const { return next[static_cast<size_t>(s) * ncls + cls[b]]; }
  bool has_calls() const;
  // The language accepted from the start without calls is empty.
  bool empty_language() const;
};

struct Budget {
  size_t max_states = 200000;  // NFA + DFA states over one compile
  double deadline = 0;         // steady-clock seconds; 0 = none
  size_t used = 0;
  void charge(size_t n);
};

// Thompson construction + subset construction. Calls are alphabet symbols.
std::shared_ptr<Dfa> build_dfa(const ExprPtr& e, Budget& budget);

// Product of two call-free DFAs: AND (both accept) or AND_NOT (a accepts, b does not).
enum class ProductMode { And, AndNot };
std::shared_ptr<Dfa> dfa_product(const Dfa& a, const Dfa& b, ProductMode mode, Budget& budget);

// DFA of open w close for the words w of call-free `d`; nullptr when `close` is a byte `d` may
// read after accepting (the result would not be deterministic) or `d` has calls.
std::shared_ptr<Dfa> dfa_wrap(const Dfa& d, uint8_t open, uint8_t close, Budget& budget);

// Removes states that cannot reach an accepting state (call edges count as passable only to
// rules flagged in `productive`; empty = all). Returns false when the start state is removed.
bool trim_dfa(Dfa& d, const std::vector<uint8_t>& productive);

}  // namespace ds::structured
