#include "coordinator/structured/mask.h"

#include <bit>

#include "coordinator/structured/pda.h"

namespace ds::structured {

namespace {

inline void set_bit(uint32_t* bits, int32_t t) {
  bits[t >> 5] |= uint32_t{1} << (t & 31);
}

class Walker {
 public:
  // ci: computing a MaskEntry (escapes from the rule become uroots); otherwise a real walk
  // where a return from the empty stack means the whole value is complete.
  Walker(const Grammar& g, const TokenVocab& v, std::vector<Frame>& pool, uint32_t* bits, std::vector<int32_t>* uroots)
      : g_(g), v_(v), nodes_(v.nodes()), pool_(pool), pda_(g, pool), bits_(bits), uroots_(uroots) {
    levels_.resize(v.max_token_len() + 2);
  }

  // Walks the subtree below `node` (-1 = all) from `start`, the heads after node's bytes.
  void run(const std::vector<Head>& start, int32_t node) {
    levels_[0] = start;
    const uint32_t begin = node < 0 ? 0 : static_cast<uint32_t>(node) + 1;
    const uint32_t end = node < 0 ? static_cast<uint32_t>(nodes_.size()) : nodes_[node].end;
    visit(node, begin, end, 0, false, false);
  }

  // Call-free lexeme state: a plain DFA walk.
  void run_lexeme(int32_t s) { visit_lexeme(0, static_cast<uint32_t>(nodes_.size()), s, false); }

 private:
  void set_tokens(uint32_t j) {
    const int32_t t = nodes_[j].token;
    if (t >= 0) {
      set_bit(bits_, t);
    } else if (t <= -2) {
      for (int32_t id : v_.dups(t)) set_bit(bits_, id);
    }
  }

  void visit(int32_t node, uint32_t begin, uint32_t end, size_t depth, bool esc, bool in_uroot) {
    if (uroots_ && esc && !in_uroot && begin < end) {
      uroots_->push_back(node);
      in_uroot = true;
    }
    const std::vector<Head>& cur = levels_[depth];
    if (cur.empty()) return;
    if (cur.size() == 1 && g_.state(cur[0].g).call_free) {
      visit_single(begin, end, cur[0], depth, in_uroot);
      return;
    }
    std::vector<Head>& nxt = levels_[depth + 1];
    for (uint32_t j = begin; j < end; j = nodes_[j].end) {
      const size_t mark = pool_.size();
      bool popped = false;
      if (pda_.step(cur, nodes_[j].byte, nxt, popped)) {
        set_tokens(j);
        if (j + 1 < nodes_[j].end) visit(static_cast<int32_t>(j), j + 1, nodes_[j].end, depth + 1, popped, in_uroot);
      }
      pool_.resize(mark);
    }
  }

  // One head inside a lexeme (no calls reachable): plain DFA steps with the stack carried
  // along, back to the general closure only where the lexeme may end.
  void visit_single(uint32_t begin, uint32_t end, Head h, size_t depth, bool in_uroot) {
    for (uint32_t j = begin; j < end; j = nodes_[j].end) {
      const int32_t t = g_.step(h.g, nodes_[j].byte);
      if (t < 0) continue;
      const Grammar::State& st = g_.state(t);
      const bool kids = j + 1 < nodes_[j].end;
      if (!st.accept) {
        set_tokens(j);
        if (kids) visit_single(j + 1, nodes_[j].end, Head{t, h.stack}, depth + 1, in_uroot);
        continue;
      }
      const size_t mark = pool_.size();
      std::vector<Head>& nxt = levels_[depth + 1];
      work_.assign(1, Head{t, h.stack});
      bool popped = false;
      pda_.closure(work_, nxt, popped);
      set_tokens(j);  // an accepting lexeme state is viable by itself
      if (kids) visit(static_cast<int32_t>(j), j + 1, nodes_[j].end, depth + 1, popped, in_uroot);
      pool_.resize(mark);
    }
  }

  void visit_lexeme(uint32_t begin, uint32_t end, int32_t s, bool in_uroot) {
    for (uint32_t j = begin; j < end; j = nodes_[j].end) {
      const int32_t t = g_.step(s, nodes_[j].byte);
      if (t < 0) continue;
      set_tokens(j);
      if (j + 1 >= nodes_[j].end) continue;
      const Grammar::State& st = g_.state(t);
      bool inu = in_uroot;
      if (st.accept && !inu) {
        uroots_->push_back(static_cast<int32_t>(j));
        inu = true;
      }
      if (st.has_bytes) visit_lexeme(j + 1, nodes_[j].end, t, inu);
    }
  }

  const Grammar& g_;
  const TokenVocab& v_;
  const std::vector<TrieNode>& nodes_;
  std::vector<Frame>& pool_;
  Pda pda_;
  uint32_t* bits_;
  std::vector<int32_t>* uroots_;
  std::vector<std::vector<Head>> levels_;
  std::vector<Head> work_;
};

std::shared_ptr<MaskEntry> compute_entry(const Grammar& g, const TokenVocab& v, int32_t state) {
  auto e = std::make_shared<MaskEntry>();
  std::vector<uint32_t> bits(v.n_words(), 0);
  std::vector<Frame> pool;
  Walker w(g, v, pool, bits.data(), &e->uroots);
  if (g.state(state).call_free)
    w.run_lexeme(state);
  else
    w.run({Head{state, -1}}, -1);
  size_t count = 0;
  for (uint32_t x : bits) count += static_cast<size_t>(std::popcount(x));
  if (count < bits.size()) {
    for (size_t i = 0; i < bits.size(); ++i)
      for (uint32_t x = bits[i]; x; x &= x - 1) e->ids.push_back(static_cast<int32_t>(i * 32 + std::countr_zero(x)));
  } else {
    e->bits = std::move(bits);
  }
  return e;
}

}  // namespace

std::shared_ptr<const MaskEntry> mask_entry(const Grammar& g, const TokenVocab& v, int32_t state) {
  if (auto e = g.cached_entry(&v, state)) return e;
  std::string sig;
  if (g.state(state).call_free) {
    sig = g.lexeme_signature(state);
    if (!sig.empty()) {
      if (auto e = v.lexeme_entry(sig)) {
        g.store_entry(&v, state, e);
        return e;
      }
    }
  }
  std::shared_ptr<const MaskEntry> e = compute_entry(g, v, state);
  if (!sig.empty()) v.store_lexeme_entry(sig, e);
  g.store_entry(&v, state, e);
  return e;
}

void add_head_mask(const Grammar& g, const TokenVocab& v, std::vector<Frame>& pool, const Head& h, const MaskEntry& e,
                   uint32_t* bits) {
  if (!e.bits.empty()) {
    for (size_t i = 0; i < e.bits.size(); ++i) bits[i] |= e.bits[i];
  } else {
    for (int32_t t : e.ids) set_bit(bits, t);
  }
  if (e.uroots.empty()) return;
  const size_t mark = pool.size();
  Walker w(g, v, pool, bits, nullptr);
  Pda pda(g, pool);
  std::vector<Head> cur, nxt;
  for (int32_t u : e.uroots) {
    cur.assign(1, h);
    if (u >= 0) {
      bool ok = true;
      for (char c : v.prefix(u)) {
        bool popped = false;
        pda.step(cur, static_cast<uint8_t>(c), nxt, popped);
        cur.swap(nxt);
        if (cur.empty()) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
    }
    w.run(cur, u);
  }
  pool.resize(mark);
}

}  // namespace ds::structured
