#include "coordinator/structured/grammar.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "coordinator/structured/regex.h"

namespace ds::structured {

namespace {

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Can rule r's DFA reach acceptance from its start, passing calls only into productive rules?
bool reaches_accept(const Dfa& d, const std::vector<uint8_t>& productive) {
  std::vector<uint8_t> seen(d.size(), 0);
  std::vector<int32_t> work{0};
  seen[0] = 1;
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (d.accept[s]) return true;
    auto visit = [&](int32_t t) {
      if (t >= 0 && !seen[t]) seen[t] = 1, work.push_back(t);
    };
    for (int c = 0; c < d.ncls; ++c) visit(d.next[static_cast<size_t>(s) * d.ncls + c]);
    for (auto [r, t] : d.calls[s])
      if (productive[r]) visit(t);
  }
  return false;
}

// call_free: no state with calls is reachable by bytes. Propagated backwards from the states
// with calls over the byte edges (rows are laid out one after another, in state order).
void mark_call_free(std::vector<Grammar::State>& states, const std::vector<int32_t>& next) {
  std::vector<std::vector<int32_t>> rev(states.size());
  std::vector<int32_t> work;
  for (size_t s = 0; s < states.size(); ++s) {
    const uint32_t row_end = s + 1 < states.size() ? states[s + 1].row : static_cast<uint32_t>(next.size());
    for (uint32_t i = states[s].row; i < row_end; ++i)
      if (next[i] >= 0) rev[next[i]].push_back(static_cast<int32_t>(s));
    if (!states[s].call_free) work.push_back(static_cast<int32_t>(s));
  }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (int32_t p : rev[s])
      if (states[p].call_free) states[p].call_free = 0, work.push_back(p);
  }
}

}  // namespace

GrammarBuilder::GrammarBuilder(const GrammarOptions& opt) {
  budget_.max_states = opt.max_states;
  if (opt.timeout_s > 0) budget_.deadline = now_s() + opt.timeout_s;
}

int32_t GrammarBuilder::new_rule() {
  exprs_.push_back(nullptr);
  return static_cast<int32_t>(exprs_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, ExprPtr e) {
  exprs_[rule] = std::move(e);
}

std::shared_ptr<const Grammar> GrammarBuilder::finish(int32_t root) {
  std::vector<std::shared_ptr<Dfa>> dfas;
  try {
    for (auto& e : exprs_) dfas.push_back(build_dfa(e ? e : e_nothing(), budget_));
  } catch (const BudgetExceeded& ex) {
    throw SchemaError("$budget", ex.what());
  }
  const size_t n = dfas.size();
  std::vector<uint8_t> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r)
      if (!productive[r] && reaches_accept(*dfas[r], productive)) productive[r] = 1, changed = true;
  }
  if (!productive[root]) throw SchemaError("$unsatisfiable", "no JSON value satisfies the schema");
  for (size_t r = 0; r < n; ++r)
    if (productive[r]) trim_dfa(*dfas[r], productive);

  auto g = std::make_shared<Grammar>();
  g->root_ = root;
  g->rule_start_.assign(n, -1);
  int32_t total = 0;
  for (size_t r = 0; r < n; ++r) {
    g->rule_start_[r] = total;
    total += static_cast<int32_t>(dfas[r]->size());
  }
  for (size_t r = 0; r < n; ++r) {
    const Dfa& d = *dfas[r];
    const int32_t base = g->rule_start_[r];
    g->cls_.push_back(d.cls);
    for (size_t s = 0; s < d.size(); ++s) {
      Grammar::State st{};
      st.rule = static_cast<int32_t>(r);
      st.row = static_cast<uint32_t>(g->next_.size());
      st.accept = d.accept[s];
      for (int c = 0; c < d.ncls; ++c) {
        const int32_t t = d.next[s * d.ncls + c];
        g->next_.push_back(t < 0 ? -1 : base + t);
        if (t >= 0) st.has_bytes = 1;
      }
      st.call_begin = static_cast<uint32_t>(g->calls_.size());
      for (auto [callee, t] : d.calls[s])
        if (productive[callee]) g->calls_.push_back({g->rule_start_[callee], base + t});
      st.call_end = static_cast<uint32_t>(g->calls_.size());
      st.call_free = st.call_begin == st.call_end;
      g->states_.push_back(st);
    }
  }
  mark_call_free(g->states_, g->next_);
  g->cache_.resize(g->states_.size());
  return g;
}

std::string Grammar::lexeme_signature(int32_t g) const {
  // BFS renumbering from g; per state: accept flag, then (first byte, target) runs. Two call-free
  // states with equal signatures accept the same byte strings, in any grammar. Byte steps never
  // leave g's rule, so one class table serves the whole walk, and bytes of the class just looked
  // at are skipped (same target: no new run). Numbering uses a per-thread stamped table instead
  // of a map: this runs on the decode path for every state whose mask is not cached yet.
  constexpr size_t kMaxStates = 4096;
  thread_local std::vector<uint32_t> stamp;
  thread_local std::vector<int32_t> bfs_id;
  thread_local uint32_t gen = 0;
  if (stamp.size() < states_.size()) stamp.resize(states_.size(), 0), bfs_id.resize(states_.size());
  if (++gen == 0) std::fill(stamp.begin(), stamp.end(), 0), gen = 1;
  const std::array<uint8_t, 256>& cls = classes(g);
  std::vector<int32_t> order{g};
  stamp[g] = gen, bfs_id[g] = 0;
  std::string sig;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    sig.push_back(states_[s].accept ? 'A' : 'N');
    int32_t prev = -2;
    for (int b = 0; b < 256; ++b) {
      if (b > 0 && cls[b] == cls[b - 1]) continue;
      const int32_t t = step_class(s, cls[b]);
      int32_t tid = -1;
      if (t >= 0) {
        if (stamp[t] != gen) stamp[t] = gen, bfs_id[t] = static_cast<int32_t>(order.size()), order.push_back(t);
        tid = bfs_id[t];
      }
      if (tid != prev) {
        sig.push_back(static_cast<char>(b));
        sig.append(reinterpret_cast<const char*>(&tid), sizeof tid);
        prev = tid;
      }
    }
    sig.push_back(';');
    if (order.size() > kMaxStates) return std::string();  // too big to be worth sharing
  }
  return sig;
}

std::shared_ptr<const MaskEntry> Grammar::cached_entry(const void* vocab, int32_t g) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_vocab_ != vocab) return nullptr;
  return cache_[g];
}

void Grammar::store_entry(const void* vocab, int32_t g, std::shared_ptr<const MaskEntry> e) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_vocab_ == nullptr) cache_vocab_ = vocab;
  if (cache_vocab_ == vocab) cache_[g] = std::move(e);
}

std::shared_ptr<const Grammar> compile_regex(std::string_view pattern, const GrammarOptions& opt) {
  GrammarBuilder b(opt);
  const int32_t root = b.new_rule();
  try {
    b.define(root, pattern_to_raw(pattern));
  } catch (const std::invalid_argument& e) {
    throw SchemaError("pattern", e.what());
  }
  return b.finish(root);
}

std::shared_ptr<const Grammar> compile_choice(const std::vector<std::string>& choices, const GrammarOptions& opt) {
  GrammarBuilder b(opt);
  const int32_t root = b.new_rule();
  std::vector<ExprPtr> alts;
  for (const auto& c : choices) alts.push_back(e_lit(c));
  b.define(root, e_alt(std::move(alts)));
  return b.finish(root);
}

}  // namespace ds::structured
