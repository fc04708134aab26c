#include "coordinator/structured/mask.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "coordinator/structured/pda.h"

namespace ds::structured {

namespace {

inline void set_bit(uint32_t* bits, int32_t t) {
  bits[t >> 5] |= uint32_t{1} << (t & 31);
}

// The loops over a whole mask (7,760 words at 248,320 tokens) are a large part of a mask's
// cost: on x86-64 GCC builds them for AVX2 and POPCNT too and picks at load time (the default
// x86-64 target has neither: std::popcount became a libgcc call, 7% of MaskBench's time).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DS_MASK_LOOP __attribute__((target_clones("avx2", "popcnt", "default")))
#else
#define DS_MASK_LOOP
#endif

DS_MASK_LOOP void or_words(uint32_t* dst, const uint32_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] |= src[i];
}

// Whether fewer than `limit` bits are set (stops counting at the limit).
DS_MASK_LOOP bool fewer_bits_than(const uint32_t* bits, size_t n, size_t limit) {
  size_t count = 0;
  for (size_t i = 0; i < n; i += 64) {
    const size_t end = std::min(n, i + 64);
    for (size_t j = i; j < end; ++j) count += static_cast<size_t>(std::popcount(bits[j]));
    if (count >= limit) return false;
  }
  return true;
}

class Walker {
 public:
  // ci: computing a MaskEntry (escapes from the rule become uroots); otherwise a real walk
  // where a return from the empty stack means the whole value is complete.
  Walker(const Grammar& g, const Trie& t, std::vector<Frame>& pool, uint32_t* bits, std::vector<int32_t>* uroots)
      : g_(g), t_(t), nodes_(t.nodes), pool_(pool), pda_(g, pool), bits_(bits), uroots_(uroots) {
    levels_.resize(t.max_len + 2);
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
      for (int32_t id : t_.dups(t)) set_bit(bits_, id);
    }
  }

  void visit(int32_t node, uint32_t begin, uint32_t end, size_t depth, bool esc, bool in_uroot) {
    if (uroots_ && esc && !in_uroot && begin < end) {
      uroots_->push_back(node);
      in_uroot = true;
    }
    const std::vector<Head>& cur = levels_[depth];
    if (cur.empty()) return;
    if (cur.size() == 1 && no_calls(cur[0].g)) {
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

  bool no_calls(int32_t s) const {
    const Grammar::State& st = g_.state(s);
    return st.call_begin == st.call_end;
  }

  // One head in a state without calls: plain DFA steps with the stack carried along, back to
  // the general closure only where the rule may return or call.
  void visit_single(uint32_t begin, uint32_t end, Head h, size_t depth, bool in_uroot) {
    for (uint32_t j = begin; j < end; j = nodes_[j].end) {
      const int32_t t = g_.step(h.g, nodes_[j].byte);
      if (t < 0) continue;
      const Grammar::State& st = g_.state(t);
      const bool kids = j + 1 < nodes_[j].end;
      if (!st.accept && st.call_begin == st.call_end) {
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
  const Trie& t_;
  const std::vector<TrieNode>& nodes_;
  std::vector<Frame>& pool_;
  Pda pda_;
  uint32_t* bits_;
  std::vector<int32_t>* uroots_;
  std::vector<std::vector<Head>> levels_;
  std::vector<Head> work_;
};

// slice_next as a table ([l][b]; -1 outside the slice): slice_limit's inner loop.
const std::array<std::array<int8_t, 256>, 8>& slice_table() {
  static const auto table = [] {
    std::array<std::array<int8_t, 256>, 8> t{};
    for (int l = 0; l < 8; ++l)
      for (int b = 0; b < 256; ++b) t[l][b] = static_cast<int8_t>(slice_next(l, static_cast<uint8_t>(b)));
    return t;
  }();
  return table;
}

// Checks state q against the string slice (token_trie.h). Returns k when every slice string of
// at most k characters stays alive in q's rule by byte steps alone (so those tokens are allowed
// whatever the stack) and every longer one dies there with no state on its way that could return
// or call (so the PDA cannot take it either); -1 when the slice does not describe q exactly.
// Runs for every state whose mask is computed: bytes that share q's rule class and slice state
// step alike (tried once), and the answer is -1 as soon as one slice string dies while another
// lives or a state on the way could return or call.
int32_t slice_limit(const Grammar& g, int32_t q, int32_t max_chars) {
  const auto& slice = slice_table();
  const std::array<uint8_t, 256>& cls = g.classes(q);  // byte steps stay in q's rule
  std::vector<int32_t> layer{q}, next;                 // grammar states at a character boundary
  std::vector<std::pair<int32_t, int32_t>> work, seen;
  bool unsafe = false;  // over all the layers: a longer string passes through each of them
  for (int32_t k = 0; k < max_chars; ++k) {
    bool dies = false, lives = false;
    next.clear();
    seen.clear();
    for (int32_t s : layer) work.emplace_back(s, 0);
    while (!work.empty()) {
      const auto [s, l] = work.back();
      work.pop_back();
      const Grammar::State& st = g.state(s);
      unsafe = unsafe || st.accept || st.call_begin != st.call_end;
      if (dies && unsafe) return -1;
      // Bytes the slice may take in state l: a lead byte at a boundary, else a continuation.
      const int lo = l == 0 ? 0x20 : 0x80, hi = l == 0 ? 0xF4 : 0xBF;
      int tried = -1;  // (class, slice state) of the last byte stepped
      for (int b = lo; b <= hi; ++b) {
        const int32_t nl = slice[l][b];
        if (nl < 0 || cls[b] * 8 + nl == tried) continue;
        tried = cls[b] * 8 + nl;
        const int32_t t = g.step_class(s, cls[b]);
        if (t < 0) {
          if (lives || unsafe) return -1;
          dies = true;
          continue;
        }
        if (l == 0) {
          if (dies) return -1;
          lives = true;
        }
        if (nl == 0) {
          if (std::find(next.begin(), next.end(), t) == next.end()) next.push_back(t);
        } else if (std::find(seen.begin(), seen.end(), std::make_pair(t, nl)) == seen.end()) {
          seen.emplace_back(t, nl);
          work.emplace_back(t, nl);
        }
      }
    }
    if (dies) return lives || unsafe ? -1 : k;
    std::sort(next.begin(), next.end());
    if (next == layer) return max_chars;  // every later layer is this one again
    layer.swap(next);
  }
  return max_chars;
}

std::shared_ptr<MaskEntry> compute_entry(const Grammar& g, const TokenVocab& v, int32_t state) {
  auto e = std::make_shared<MaskEntry>();
  std::vector<uint32_t> bits(v.n_words(), 0);
  std::vector<Frame> pool;
  const int32_t k = v.slice_max_chars() > 0 ? slice_limit(g, state, v.slice_max_chars()) : -1;
  // Where the slice applies, its tokens come from a precomputed bitset and only the tokens
  // outside it are walked (string bodies: a few thousand instead of the whole vocabulary).
  if (k > 0) std::memcpy(bits.data(), v.slice_upto(k), v.n_words() * sizeof(uint32_t));
  e->rest = k >= 0;
  Walker w(g, e->rest ? v.rest_trie() : v.trie(), pool, bits.data(), &e->uroots);
  if (g.state(state).call_free)
    w.run_lexeme(state);
  else
    w.run({Head{state, -1}}, -1);
  if (fewer_bits_than(bits.data(), bits.size(), bits.size())) {  // an id list is shorter
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
    or_words(bits, e.bits.data(), e.bits.size());
  } else {
    for (int32_t t : e.ids) set_bit(bits, t);
  }
  if (e.uroots.empty()) return;
  const size_t mark = pool.size();
  const Trie& trie = e.rest ? v.rest_trie() : v.trie();
  Walker w(g, trie, pool, bits, nullptr);
  Pda pda(g, pool);
  std::vector<Head> cur, nxt;
  for (int32_t u : e.uroots) {
    cur.assign(1, h);
    if (u >= 0) {
      bool ok = true;
      for (char c : trie.prefix(u)) {
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
