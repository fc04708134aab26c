// Internal: stepping a set of PDA heads over one byte, with the epsilon closure through calls
// (push a return frame) and returns (pop). Shared by the Matcher and the mask walker.
#pragma once

#include <vector>

#include "coordinator/structured/grammar.h"
#include "coordinator/structured/matcher.h"

namespace ds::structured {

class Pda {
 public:
  Pda(const Grammar& g, std::vector<Frame>& pool) : g_(g), pool_(pool) {}

  // Expands `work` (consumed) into `out`: heads that can take a byte. `popped_empty` is set
  // when some head returns from the bottom of its stack (the whole value is complete / in a
  // mask walk: the state's rule returns to a caller we do not know). With `expand_calls`
  // false, only returns are followed.
  void closure(std::vector<Head>& work, std::vector<Head>& out, bool& popped_empty) {
    out.clear();
    seen_.clear();
    popped_empty = false;
    while (!work.empty()) {
      const Head h = work.back();
      work.pop_back();
      if (contains(seen_, h)) continue;
      seen_.push_back(h);
      const Grammar::State& st = g_.state(h.g);
      if (st.has_bytes) out.push_back(h);
      if (st.call_begin != st.call_end) {
        const int32_t depth = h.stack < 0 ? 0 : pool_[h.stack].depth;
        if (depth < Matcher::kMaxDepth) {
          for (const Grammar::Call* c = g_.calls_begin(h.g); c != g_.calls_end(h.g); ++c) {
            pool_.push_back(Frame{h.stack, c->target, depth + 1});
            work.push_back(Head{c->start, static_cast<int32_t>(pool_.size() - 1)});
          }
        }
      }
      if (st.accept) {
        if (h.stack < 0) {
          popped_empty = true;
        } else {
          const Frame f = pool_[h.stack];
          work.push_back(Head{f.ret, f.parent});
        }
      }
    }
  }

  // One byte from `in` into `out` (closed). Returns !out.empty() || popped_empty.
  bool step(const std::vector<Head>& in, uint8_t b, std::vector<Head>& out, bool& popped_empty) {
    work_.clear();
    for (const Head& h : in) {
      const int32_t t = g_.step(h.g, b);
      if (t >= 0) work_.push_back(Head{t, h.stack});
    }
    if (work_.empty()) {
      out.clear();
      popped_empty = false;
      return false;
    }
    // Fast path: one head landing on a state without calls or returns.
    if (work_.size() == 1) {
      const Grammar::State& st = g_.state(work_[0].g);
      if (!st.accept && st.call_begin == st.call_end) {
        out.assign(1, work_[0]);
        popped_empty = false;
        return true;
      }
    }
    closure(work_, out, popped_empty);
    return !out.empty() || popped_empty;
  }

 private:
  static bool contains(const std::vector<Head>& v, const Head& h) {
    for (const Head& x : v)
      if (x == h) return true;
    return false;
  }

  const Grammar& g_;
  std::vector<Frame>& pool_;
  std::vector<Head> work_, seen_;
};

}  // namespace ds::structured
