#include "coordinator/structured/automaton.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_map>

namespace ds::structured {

namespace {

std::shared_ptr<Expr> make(Expr::Kind k) {
  auto e = std::make_shared<Expr>();
  e->kind = k;
  return e;
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Thompson NFA: epsilon, byte-set and call edges. Edges are appended as the fragments are built
// and grouped by source state once (group()): three edge arrays rather than three small vectors
// per state, whose allocations were a large part of a schema's compile time.
struct Nfa {
  struct Eps {
    int32_t from, to;
  };
  struct Bytes {
    int32_t from, to;
    ByteSet set;
  };
  struct Call {
    int32_t from, rule, to;
  };
  int32_t n_states = 0;
  std::vector<Eps> eps;
  std::vector<Bytes> bytes;
  std::vector<Call> calls;
  // After group(): state s's edges of each kind are [row[s], row[s + 1]).
  std::vector<uint32_t> eps_row, bytes_row, calls_row;
  Budget* budget = nullptr;

  int32_t add() {
    if ((n_states & 1023) == 0) budget->charge(1024);
    return n_states++;
  }
  void add_eps(int32_t from, int32_t to) { eps.push_back({from, to}); }
  void add_bytes(int32_t from, const ByteSet& set, int32_t to) { bytes.push_back({from, to, set}); }
  void add_call(int32_t from, int32_t rule, int32_t to) { calls.push_back({from, rule, to}); }
  void group() {
    group_by_source(eps, eps_row);
    group_by_source(bytes, bytes_row);
    group_by_source(calls, calls_row);
  }

 private:
  // Stable counting sort by `from` (an edge's order within its state is kept).
  template <class E>
  void group_by_source(std::vector<E>& edges, std::vector<uint32_t>& row) const {
    row.assign(static_cast<size_t>(n_states) + 1, 0);
    for (const E& e : edges) ++row[e.from + 1];
    for (int32_t s = 0; s < n_states; ++s) row[s + 1] += row[s];
    std::vector<E> out(edges.size());
    std::vector<uint32_t> fill(row.begin(), row.end() - 1);
    for (const E& e : edges) out[fill[e.from]++] = e;
    edges.swap(out);
  }
};

struct Frag {
  int32_t in, out;
};

Frag build(Nfa& n, const Expr& e);

Frag build_embed(Nfa& n, const Dfa& d) {
  Frag f{n.add(), n.add()};
  const int32_t base = n.n_states;
  for (size_t s = 0; s < d.size(); ++s) n.add();
  n.add_eps(f.in, base);
  std::vector<ByteSet> cls_bytes(static_cast<size_t>(d.ncls));
  for (int b = 0; b < 256; ++b) cls_bytes[d.cls[b]].set(static_cast<uint8_t>(b));
  for (size_t s = 0; s < d.size(); ++s) {
    const int32_t ns = base + static_cast<int32_t>(s);
    for (int c = 0; c < d.ncls; ++c) {
      const int32_t t = d.next[s * d.ncls + c];
      if (t >= 0) n.add_bytes(ns, cls_bytes[c], base + t);
    }
    for (auto [r, t] : d.calls[s]) n.add_call(ns, r, base + t);
    if (d.accept[s]) n.add_eps(ns, f.out);
  }
  return f;
}

Frag build_graph(Nfa& n, const Expr& e) {
  Frag f{n.add(), n.add()};
  std::vector<int32_t> node(static_cast<size_t>(e.n_nodes));
  for (auto& x : node) x = n.add();
  n.add_eps(f.in, node[0]);
  for (int32_t a : e.accept_nodes) n.add_eps(node[a], f.out);
  for (const auto& edge : e.edges) {
    Frag k = build(n, *edge.e);
    n.add_eps(node[edge.from], k.in);
    n.add_eps(k.out, node[edge.to]);
  }
  return f;
}

Frag build_repeat(Nfa& n, const Expr& e) {
  Frag f{n.add(), -1};
  int32_t cur = f.in;
  for (uint32_t i = 0; i < e.min; ++i) {
    Frag k = build(n, *e.kids[0]);
    n.add_eps(cur, k.in);
    cur = k.out;
  }
  const int32_t out = n.add();
  if (e.max == kUnbounded) {
    Frag k = build(n, *e.kids[0]);
    n.add_eps(cur, k.in);
    n.add_eps(k.out, cur);
    n.add_eps(cur, out);
  } else {
    // Optional copies chain: each one may stop early.
    for (uint32_t i = e.min; i < e.max; ++i) {
      n.add_eps(cur, out);
      Frag k = build(n, *e.kids[0]);
      n.add_eps(cur, k.in);
      cur = k.out;
    }
    n.add_eps(cur, out);
  }
  f.out = out;
  return f;
}

Frag build(Nfa& n, const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Nothing:
      return Frag{n.add(), n.add()};
    case Expr::Kind::Empty: {
      const int32_t s = n.add();
      return Frag{s, s};
    }
    case Expr::Kind::Bytes: {
      Frag f{n.add(), n.add()};
      n.add_bytes(f.in, e.bytes, f.out);
      return f;
    }
    case Expr::Kind::Call: {
      Frag f{n.add(), n.add()};
      n.add_call(f.in, e.rule, f.out);
      return f;
    }
    case Expr::Kind::Seq: {
      const int32_t s = n.add();
      int32_t cur = s;
      for (const auto& k : e.kids) {
        Frag kf = build(n, *k);
        n.add_eps(cur, kf.in);
        cur = kf.out;
      }
      return Frag{s, cur};
    }
    case Expr::Kind::Alt: {
      Frag f{n.add(), n.add()};
      for (const auto& k : e.kids) {
        Frag kf = build(n, *k);
        n.add_eps(f.in, kf.in);
        n.add_eps(kf.out, f.out);
      }
      return f;
    }
    case Expr::Kind::Repeat:
      return build_repeat(n, e);
    case Expr::Kind::Embed:
      return build_embed(n, *e.dfa);
    case Expr::Kind::Graph:
      return build_graph(n, e);
  }
  return Frag{n.add(), n.add()};
}

// Byte classes: bytes that no byte set of the NFA tells apart share a class.
// `all` receives the distinct byte sets, `edge_set` each byte edge's index in it (edges in
// state order).
int byte_classes(const Nfa& n, std::array<uint8_t, 256>& cls, std::vector<ByteSet>& all,
                 std::vector<int32_t>& edge_set) {
  cls.fill(0);
  int ncls = 1;
  // Distinct byte sets (open addressing on a hash of the words).
  std::vector<int32_t> slot(256, -1);
  auto hash = [](const ByteSet& b) {
    return (b.w[0] * 0x9E3779B97F4A7C15ull) ^ (b.w[1] * 0xC2B2AE3D27D4EB4Full) ^ (b.w[2] * 0x165667B19E3779F9ull) ^
           (b.w[3] * 0x27D4EB2F165667C5ull);
  };
  for (const Nfa::Bytes& e : n.bytes) {  // grouped: in state order
    size_t k = (hash(e.set) >> 20) & (slot.size() - 1);
    while (slot[k] >= 0 && !(all[slot[k]] == e.set)) k = (k + 1) & (slot.size() - 1);
    if (slot[k] >= 0) {
      edge_set.push_back(slot[k]);
      continue;
    }
    slot[k] = static_cast<int32_t>(all.size());
    edge_set.push_back(slot[k]);
    all.push_back(e.set);
    if (2 * all.size() > slot.size()) {
      slot.assign(slot.size() * 2, -1);
      for (size_t i = 0; i < all.size(); ++i) {
        size_t j = (hash(all[i]) >> 20) & (slot.size() - 1);
        while (slot[j] >= 0) j = (j + 1) & (slot.size() - 1);
        slot[j] = static_cast<int32_t>(i);
      }
    }
  }
  {
    for (const ByteSet& bs : all) {
      std::array<int, 512> remap;
      remap.fill(-1);
      int next = 0;
      for (int b = 0; b < 256; ++b) {
        const int key = cls[b] * 2 + (bs.test(static_cast<uint8_t>(b)) ? 1 : 0);
        if (remap[key] < 0) remap[key] = next++;
        cls[b] = static_cast<uint8_t>(remap[key]);
      }
      ncls = next;
    }
  }
  return ncls;
}

uint64_t hash_ints(const int32_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(p[i])) * 1099511628211ull;
  return h ^ (h >> 29);
}

// Sorted state sets -> ids, the sets stored back to back in one pool (open addressing), so
// that interning allocates nothing per set. Entry i's set is set(i).
class SetTable {
 public:
  SetTable() : slots_(1024, -1) {}
  size_t size() const { return val_.size(); }
  int32_t find(const std::vector<int32_t>& v, uint64_t h) const {
    for (size_t k = h & (slots_.size() - 1);; k = (k + 1) & (slots_.size() - 1)) {
      const int32_t e = slots_[k];
      if (e < 0) return -1;
      if (hash_[e] == h && off_[e + 1] - off_[e] == v.size() && std::equal(v.begin(), v.end(), pool_.begin() + off_[e]))
        return val_[e];
    }
  }
  void insert(const std::vector<int32_t>& v, uint64_t h, int32_t val) {
    if (2 * (val_.size() + 1) > slots_.size()) grow();
    const int32_t e = static_cast<int32_t>(val_.size());
    pool_.insert(pool_.end(), v.begin(), v.end());
    off_.push_back(pool_.size());
    hash_.push_back(h);
    val_.push_back(val);
    place(e);
  }
  void set(size_t e, std::vector<int32_t>& out) const {
    out.assign(pool_.begin() + off_[e], pool_.begin() + off_[e + 1]);
  }

 private:
  void place(int32_t e) {
    size_t k = hash_[e] & (slots_.size() - 1);
    while (slots_[k] >= 0) k = (k + 1) & (slots_.size() - 1);
    slots_[k] = e;
  }
  void grow() {
    slots_.assign(slots_.size() * 2, -1);
    for (size_t e = 0; e < val_.size(); ++e) place(static_cast<int32_t>(e));
  }
  std::vector<int32_t> pool_;
  std::vector<size_t> off_{0};
  std::vector<uint64_t> hash_;
  std::vector<int32_t> val_;
  std::vector<int32_t> slots_;
};

void eps_closure(const Nfa& n, std::vector<int32_t>& set, std::vector<uint8_t>& mark) {
  std::vector<int32_t> work(set.begin(), set.end());
  for (int32_t s : set) mark[s] = 1;
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (uint32_t k = n.eps_row[s]; k < n.eps_row[s + 1]; ++k)
      if (const int32_t t = n.eps[k].to; !mark[t]) {
        mark[t] = 1;
        set.push_back(t);
        work.push_back(t);
      }
  }
  for (int32_t s : set) mark[s] = 0;
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
}

}  // namespace

void Budget::charge(size_t n) {
  used += n;
  if (used > max_states) throw BudgetExceeded("grammar exceeds the state budget");
  if (deadline > 0 && now_s() > deadline) throw BudgetExceeded("grammar compile exceeded its time budget");
}

ExprPtr e_nothing() {
  return make(Expr::Kind::Nothing);
}
ExprPtr e_empty() {
  return make(Expr::Kind::Empty);
}
ExprPtr e_bytes(const ByteSet& s) {
  auto e = make(Expr::Kind::Bytes);
  e->bytes = s;
  return e;
}
ExprPtr e_byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return e_bytes(s);
}
ExprPtr e_lit(std::string_view s) {
  std::vector<ExprPtr> kids;
  for (char c : s) kids.push_back(e_byte(static_cast<uint8_t>(c)));
  return e_seq(std::move(kids));
}
ExprPtr e_seq(std::vector<ExprPtr> kids) {
  if (kids.size() == 1) return kids[0];
  auto e = make(Expr::Kind::Seq);
  e->kids = std::move(kids);
  return e;
}
ExprPtr e_alt(std::vector<ExprPtr> kids) {
  if (kids.empty()) return e_nothing();
  if (kids.size() == 1) return kids[0];
  auto e = make(Expr::Kind::Alt);
  e->kids = std::move(kids);
  return e;
}
ExprPtr e_rep(ExprPtr k, uint32_t min, uint32_t max) {
  auto e = make(Expr::Kind::Repeat);
  e->kids.push_back(std::move(k));
  e->min = min;
  e->max = max;
  return e;
}
ExprPtr e_opt(ExprPtr k) {
  return e_rep(std::move(k), 0, 1);
}
ExprPtr e_call(int32_t rule) {
  auto e = make(Expr::Kind::Call);
  e->rule = rule;
  return e;
}
ExprPtr e_graph(int32_t n_nodes, std::vector<int32_t> accept_nodes, std::vector<Expr::Edge> edges) {
  auto e = make(Expr::Kind::Graph);
  e->n_nodes = n_nodes;
  e->accept_nodes = std::move(accept_nodes);
  e->edges = std::move(edges);
  return e;
}
ExprPtr e_embed(std::shared_ptr<const Dfa> dfa) {
  auto e = make(Expr::Kind::Embed);
  e->dfa = std::move(dfa);
  return e;
}

bool Dfa::has_calls() const {
  for (const auto& c : calls)
    if (!c.empty()) return true;
  return false;
}

bool Dfa::empty_language() const {
  std::vector<uint8_t> seen(size(), 0);
  std::vector<int32_t> work{0};
  seen[0] = 1;
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (accept[s]) return false;
    for (int c = 0; c < ncls; ++c) {
      const int32_t t = next[static_cast<size_t>(s) * ncls + c];
      if (t >= 0 && !seen[t]) seen[t] = 1, work.push_back(t);
    }
  }
  return true;
}

std::shared_ptr<Dfa> build_dfa(const ExprPtr& e, Budget& budget) {
  if (e->kind == Expr::Kind::Embed) {  // already deterministic
    budget.charge(e->dfa->size());
    return std::make_shared<Dfa>(*e->dfa);
  }
  Nfa n;
  n.budget = &budget;
  const Frag f = build(n, *e);
  n.group();
  auto d = std::make_shared<Dfa>();
  std::vector<ByteSet> sets_of_bytes;
  std::vector<int32_t> edge_set;
  d->ncls = byte_classes(n, d->cls, sets_of_bytes, edge_set);
  std::array<uint8_t, 256> rep{};
  for (int b = 255; b >= 0; --b) rep[d->cls[b]] = static_cast<uint8_t>(b);
  // The classes of each distinct byte set.
  std::vector<std::vector<int32_t>> set_cls(sets_of_bytes.size());
  for (size_t i = 0; i < sets_of_bytes.size(); ++i)
    for (int c = 0; c < d->ncls; ++c)
      if (sets_of_bytes[i].test(rep[c])) set_cls[i].push_back(c);

  // Byte edges as (class, target) moves, expanded once per NFA state rather than tested per
  // class in every DFA state that contains it.
  // NFA state s's moves: moves[move_row[s] .. move_row[s + 1]).
  std::vector<std::pair<int32_t, int32_t>> moves;
  std::vector<uint32_t> move_row(static_cast<size_t>(n.n_states) + 1, 0);
  for (int32_t s = 0; s < n.n_states; ++s) {
    for (uint32_t k = n.bytes_row[s]; k < n.bytes_row[s + 1]; ++k)
      for (int32_t c : set_cls[edge_set[k]]) moves.emplace_back(c, n.bytes[k].to);
    move_row[s + 1] = static_cast<uint32_t>(moves.size());
  }
  std::vector<uint8_t> mark(static_cast<size_t>(n.n_states), 0);
  // States are looked up by their kernel (the move targets, before the epsilon closure) first:
  // kernels are small and most lookups hit, so the closure is computed once per new kernel.
  SetTable ids, by_kernel;  // ids: entry i is DFA state i
  std::vector<int32_t> set;
  auto intern = [&](std::vector<int32_t>& kernel) {  // sorted in place; left for reuse
    std::sort(kernel.begin(), kernel.end());
    kernel.erase(std::unique(kernel.begin(), kernel.end()), kernel.end());
    const uint64_t hk = hash_ints(kernel.data(), kernel.size());
    if (const int32_t k = by_kernel.find(kernel, hk); k >= 0) return k;
    set = kernel;
    eps_closure(n, set, mark);
    const uint64_t hs = hash_ints(set.data(), set.size());
    int32_t id = ids.find(set, hs);
    if (id < 0) {
      id = static_cast<int32_t>(ids.size());
      ids.insert(set, hs, id);
      if ((ids.size() & 255) == 0) budget.charge(256);
    }
    by_kernel.insert(kernel, hk, id);
    return id;
  };
  std::vector<int32_t> start{f.in};
  intern(start);
  std::vector<std::vector<int32_t>> buckets(static_cast<size_t>(d->ncls));
  std::vector<int32_t> cur;
  for (size_t i = 0; i < ids.size(); ++i) {
    ids.set(i, cur);
    d->accept.push_back(std::binary_search(cur.begin(), cur.end(), f.out) ? 1 : 0);
    bool calls = false;
    for (int32_t s : cur) {
      for (uint32_t k = move_row[s]; k < move_row[s + 1]; ++k) buckets[moves[k].first].push_back(moves[k].second);
      calls = calls || n.calls_row[s] != n.calls_row[s + 1];
    }
    for (int c = 0; c < d->ncls; ++c) {
      d->next.push_back(buckets[c].empty() ? -1 : intern(buckets[c]));
      buckets[c].clear();
    }
    d->calls.emplace_back();
    if (!calls) continue;
    std::map<int32_t, std::vector<int32_t>> by_rule;
    for (int32_t s : cur)
      for (uint32_t k = n.calls_row[s]; k < n.calls_row[s + 1]; ++k) by_rule[n.calls[k].rule].push_back(n.calls[k].to);
    for (auto& [r, tgt] : by_rule) {
      const int32_t t = intern(tgt);
      d->calls[i].emplace_back(r, t);
    }
  }
  return d;
}

std::shared_ptr<Dfa> dfa_wrap(const Dfa& d, uint8_t open, uint8_t close, Budget& budget) {
  if (d.has_calls()) return nullptr;
  for (size_t s = 0; s < d.size(); ++s)
    if (d.accept[s] && d.step(static_cast<int32_t>(s), close) >= 0) return nullptr;
  auto out = std::make_shared<Dfa>();
  // d's classes with `open` and `close` split off.
  std::map<std::pair<int, int>, int> cls;
  for (int b = 0; b < 256; ++b) {
    const int tag = (b == open ? 1 : 0) + (b == close ? 2 : 0);
    auto it = cls.emplace(std::make_pair(int{d.cls[b]}, tag), static_cast<int>(cls.size())).first;
    out->cls[b] = static_cast<uint8_t>(it->second);
  }
  const int nc = out->ncls = static_cast<int>(cls.size());
  std::array<uint8_t, 256> rep{};
  for (int b = 255; b >= 0; --b) rep[out->cls[b]] = static_cast<uint8_t>(b);
  // 0: start, 1 + s: d's state s, n - 1: after `close`.
  const size_t n = d.size() + 2;
  budget.charge(n);
  out->next.assign(n * nc, -1);
  out->accept.assign(n, 0);
  out->calls.assign(n, {});
  out->next[out->cls[open]] = 1;
  for (size_t s = 0; s < d.size(); ++s) {
    for (int c = 0; c < nc; ++c) {
      const int32_t t = d.step(static_cast<int32_t>(s), rep[c]);
      if (t >= 0) out->next[(s + 1) * nc + c] = t + 1;
    }
    if (d.accept[s]) out->next[(s + 1) * nc + out->cls[close]] = static_cast<int32_t>(n - 1);
  }
  out->accept[n - 1] = 1;
  out->trimmed = d.trimmed;  // every state of d still reaches `close`
  return out;
}

std::shared_ptr<Dfa> dfa_product(const Dfa& a, const Dfa& b, ProductMode mode, Budget& budget) {
  auto d = std::make_shared<Dfa>();
  std::map<std::pair<int, int>, int> pair_cls;
  for (int x = 0; x < 256; ++x) {
    auto key = std::make_pair(int{a.cls[x]}, int{b.cls[x]});
    auto it = pair_cls.find(key);
    if (it == pair_cls.end()) it = pair_cls.emplace(key, static_cast<int>(pair_cls.size())).first;
    d->cls[x] = static_cast<uint8_t>(it->second);
  }
  d->ncls = static_cast<int>(pair_cls.size());
  std::array<uint8_t, 256> rep{};
  for (int x = 255; x >= 0; --x) rep[d->cls[x]] = static_cast<uint8_t>(x);
  std::unordered_map<uint64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> states;
  auto intern = [&](int32_t sa, int32_t sb) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sa)) << 32) | static_cast<uint32_t>(sb);
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    const int32_t id = static_cast<int32_t>(states.size());
    ids.emplace(key, id);
    states.emplace_back(sa, sb);
    budget.charge(1);
    return id;
  };
  intern(0, 0);
  for (size_t i = 0; i < states.size(); ++i) {
    const auto [sa, sb] = states[i];
    const bool acc_b = sb >= 0 && b.accept[sb];
    d->accept.push_back(a.accept[sa] && (mode == ProductMode::And ? acc_b : !acc_b));
    d->calls.emplace_back();
    for (int c = 0; c < d->ncls; ++c) {
      const int32_t ta = a.step(sa, rep[c]);
      const int32_t tb = sb >= 0 ? b.step(sb, rep[c]) : -1;
      int32_t t = -1;
      if (ta >= 0 && (tb >= 0 || mode == ProductMode::AndNot)) t = intern(ta, tb);
      d->next.push_back(t);
    }
  }
  trim_dfa(*d, {});
  return d;
}

bool trim_dfa(Dfa& d, const std::vector<uint8_t>& productive) {
  if (d.trimmed) return true;
  const size_t n = d.size();
  auto passable = [&](int32_t r) { return productive.empty() || productive[r]; };
  // Reverse edges in compressed rows (two passes: in-degrees, then sources).
  std::vector<uint32_t> row(n + 1, 0);
  auto each_edge = [&](auto&& f) {
    for (size_t s = 0; s < n; ++s) {
      const int32_t* r = d.next.data() + s * d.ncls;
      for (int c = 0; c < d.ncls; ++c)
        if (r[c] >= 0) f(r[c], static_cast<int32_t>(s));
      for (auto [rl, t] : d.calls[s])
        if (passable(rl)) f(t, static_cast<int32_t>(s));
    }
  };
  each_edge([&](int32_t t, int32_t) { ++row[t + 1]; });
  for (size_t i = 0; i < n; ++i) row[i + 1] += row[i];
  std::vector<int32_t> src(row[n]);
  {
    std::vector<uint32_t> fill(row.begin(), row.end() - 1);
    each_edge([&](int32_t t, int32_t s) { src[fill[t]++] = s; });
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> work;
  for (size_t s = 0; s < n; ++s)
    if (d.accept[s]) live[s] = 1, work.push_back(static_cast<int32_t>(s));
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (uint32_t k = row[s]; k < row[s + 1]; ++k)
      if (!live[src[k]]) live[src[k]] = 1, work.push_back(src[k]);
  }
  if (!live[0]) {
    d.next.assign(d.ncls, -1);
    d.accept.assign(1, 0);
    d.calls.assign(1, {});
    return false;
  }
  // Forward reachability over live states, renumbered in BFS order (start stays 0).
  std::vector<int32_t> id(n, -1);
  std::vector<int32_t> order{0};
  id[0] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    auto visit = [&](int32_t t) {
      if (t >= 0 && live[t] && id[t] < 0) id[t] = static_cast<int32_t>(order.size()), order.push_back(t);
    };
    for (int c = 0; c < d.ncls; ++c) visit(d.next[static_cast<size_t>(s) * d.ncls + c]);
    for (auto [r, t] : d.calls[s])
      if (passable(r)) visit(t);
  }
  bool identity = order.size() == n;
  for (size_t i = 0; identity && i < n; ++i) identity = order[i] == static_cast<int32_t>(i);
  if (identity) {  // every state live and reached in index order: nothing to renumber
    for (auto& cs : d.calls)
      cs.erase(std::remove_if(cs.begin(), cs.end(), [&](const auto& rt) { return !passable(rt.first); }), cs.end());
    d.trimmed = !d.has_calls();
    return true;
  }
  Dfa out;
  out.cls = d.cls;
  out.ncls = d.ncls;
  for (int32_t s : order) {
    out.accept.push_back(d.accept[s]);
    for (int c = 0; c < d.ncls; ++c) {
      const int32_t t = d.next[static_cast<size_t>(s) * d.ncls + c];
      out.next.push_back(t >= 0 ? id[t] : -1);
    }
    out.calls.emplace_back();
    for (auto [r, t] : d.calls[s])
      if (passable(r) && id[t] >= 0) out.calls.back().emplace_back(r, id[t]);
  }
  out.trimmed = !out.has_calls();
  d = std::move(out);
  return true;
}

}  // namespace ds::structured
