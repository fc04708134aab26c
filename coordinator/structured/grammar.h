// A compiled grammar: rules are DFAs over bytes and calls of other rules (a recursive
// transition network, i.e. a pushdown automaton). Immutable after compilation and shared by
// all the Matchers of the sequences that use it; the only mutable part is the token-mask
// cache, guarded by a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "coordinator/structured/automaton.h"

namespace ds::structured {

// A schema (or regex / choice list) the compiler cannot honour exactly. `keyword` is the JSON
// Schema keyword it cannot honour ("not", "uniqueItems", "pattern", "$ref", ...), "$budget"
// when the compile exceeds GrammarOptions' budget, or "$unsatisfiable" when nothing matches.
struct SchemaError : std::invalid_argument {
  SchemaError(std::string kw, const std::string& what)
      : std::invalid_argument(kw + ": " + what), keyword(std::move(kw)) {}
  std::string keyword;
};

struct GrammarOptions {
  // Whitespace policy for JSON: between any two JSON tokens a run of 0..max_ws bytes of
  // [ \t\n\r] (0 = compact JSON only). Compact JSON is always allowed; separators are never
  // mandatory beyond the JSON syntax. No whitespace before the top-level value nor after it:
  // the grammar ends with the value's last byte (then only EOS can follow).
  uint32_t max_ws = 8;
  // Text no JSON string (key or value, quotes included) may contain: a tool call's non-string
  // parameter, written as JSON between <parameter=P> and </parameter>, sets "</parameter>" (the
  // parser cuts the value there); the model can still write it as "<\/parameter>". Empty: none.
  std::string forbid_in_strings;
  // Compile budget: automaton states over the whole compile, and wall time. Exceeding either
  // throws SchemaError{"$budget"} (fail closed).
  size_t max_states = 400000;
  double timeout_s = 2.0;
};

struct MaskEntry;  // token_trie.h

class Grammar {
 public:
  struct State {
    int32_t rule;
    uint32_t row;  // offset of this state's row in next_
    uint32_t call_begin, call_end;
    uint8_t accept;     // the rule may return here
    uint8_t has_bytes;  // some byte leads on
    uint8_t call_free;  // no call reachable by bytes from here: a pure lexeme state
  };
  struct Call {
    int32_t start;   // global start state of the callee
    int32_t target;  // global state to return to
  };

  int32_t root_start() const { return rule_start_[root_]; }
  const State& state(int32_t g) const { return states_[g]; }
  size_t n_states() const { return states_.size(); }
  int32_t step(int32_t g, uint8_t b) const {
    const State& s = states_[g];
    return next_[s.row + cls_[s.rule][b]];
  }
  // The byte classes of g's rule (bytes of one class always step alike) and the step on one.
  const std::array<uint8_t, 256>& classes(int32_t g) const { return cls_[states_[g].rule]; }
  int32_t step_class(int32_t g, uint8_t c) const { return next_[states_[g].row + c]; }
  const Call* calls_begin(int32_t g) const { return calls_.data() + states_[g].call_begin; }
  const Call* calls_end(int32_t g) const { return calls_.data() + states_[g].call_end; }
  // Canonical text of the lexeme automaton reachable from call-free state g (cache key shared
  // across grammars).
  std::string lexeme_signature(int32_t g) const;

  // Mask cache (one vocabulary per grammar; a second vocabulary bypasses it).
  std::shared_ptr<const MaskEntry> cached_entry(const void* vocab, int32_t g) const;
  void store_entry(const void* vocab, int32_t g, std::shared_ptr<const MaskEntry> e) const;

 private:
  friend class GrammarBuilder;
  int32_t root_ = 0;
  std::vector<int32_t> rule_start_;
  std::vector<State> states_;
  std::vector<std::array<uint8_t, 256>> cls_;
  std::vector<int32_t> next_;
  std::vector<Call> calls_;

  mutable std::mutex mu_;
  mutable const void* cache_vocab_ = nullptr;
  mutable std::vector<std::shared_ptr<const MaskEntry>> cache_;
};

// Rules are declared first (ids for recursion) and defined later.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(const GrammarOptions& opt);
  int32_t new_rule();
  void define(int32_t rule, ExprPtr e);
  bool defined(int32_t rule) const { return exprs_[rule] != nullptr; }
  Budget& budget() { return budget_; }
  // Builds, trims (unproductive rules removed) and flattens. Throws SchemaError.
  std::shared_ptr<const Grammar> finish(int32_t root);

 private:
  Budget budget_;
  std::vector<ExprPtr> exprs_;
};

std::shared_ptr<const Grammar> compile_regex(std::string_view pattern, const GrammarOptions& opt = {});
std::shared_ptr<const Grammar> compile_choice(const std::vector<std::string>& choices, const GrammarOptions& opt = {});

}  // namespace ds::structured
