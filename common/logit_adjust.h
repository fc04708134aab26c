// Logit edits the last stage applies before the sampling rule: logit_bias, the ids min_tokens
// masks, and the repetition / frequency / presence penalties, folded into at most one LogitEdit
// per (row, id). The edits are computed on the host (they are few: the ids a sequence has seen)
// and applied where the logits are (Backend::edit_logits), so a device digest never needs the
// full rows on the host. Order, as vLLM's: repetition penalty (a scale), then frequency and
// presence penalties, then logit_bias (adds); a min_tokens mask wins over all of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ds {

// One change to one logit of a block of logits rows [n_rows, n_vocab]:
// l = (l > 0 ? l * scale_pos : l * scale_neg) + add; add = -inf masks the id.
struct LogitEdit {
  uint32_t row = 0;
  int32_t id = 0;
  float scale_pos = 1.0f;
  float scale_neg = 1.0f;
  float add = 0.0f;
};

// The host reference of the edit (the CUDA twin gives the same bits: one multiply, one add, in
// float). Each (row, id) at most once; rows < n_rows and ids < n_vocab (std::invalid_argument).
void apply_logit_edits(float* logits, size_t n_rows, size_t n_vocab, const LogitEdit* edits, size_t n_edits);

// What a sequence's logit rows add to the rule, besides the rule itself.
struct LogitAdjust {
  std::vector<std::pair<int32_t, float>> bias;  // id -> added to its logit; ids sorted, unique
  uint32_t min_tokens = 0;
  std::vector<int32_t> masked;      // end-of-generation and stop ids, sorted, unique
  uint32_t prompt_len = 0;          // positions [0, prompt_len) hold the prompt
  float repetition_penalty = 1.0f;  // > 0, over prompt + generated ids: positive logits / it, negative x it
  float frequency_penalty = 0.0f;   // minus it x the id's count among the generated tokens
  float presence_penalty = 0.0f;    // minus it once the id was generated
  bool operator==(const LogitAdjust& o) const {  // spelled out: CUDA files include this as C++17
    return bias == o.bias && min_tokens == o.min_tokens && masked == o.masked && prompt_len == o.prompt_len &&
           repetition_penalty == o.repetition_penalty && frequency_penalty == o.frequency_penalty &&
           presence_penalty == o.presence_penalty;
  }
  // The penalties read the sequence's earlier tokens (TokenHistory).
  bool penalizes() const { return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f; }
  bool empty() const { return bias.empty() && (min_tokens == 0 || masked.empty()) && !penalizes(); }
};

// One sequence's tokens by position, and the counts of ids over positions [0, counted()) that
// the penalties read, kept incrementally: a step writes its tokens from its start position
// (forgetting later ones: rejected drafts), and each logit row counts up to its own position,
// so a verify row sees the drafts before it and none after.
class TokenHistory {
 public:
  explicit TokenHistory(uint32_t prompt_len = 0) : prompt_len_(prompt_len) {}
  // Starts over with the tokens of positions [0, tokens.size()).
  void reset(const std::vector<int32_t>& tokens);
  size_t size() const { return tokens_.size(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Writes tokens at positions [start, start + n); positions after them are forgotten.
  // start <= size() (std::invalid_argument otherwise: the positions before it are unknown).
  void write(uint32_t start, const int32_t* tokens, size_t n);
  // Makes the counts cover positions [0, end); end <= size() (std::invalid_argument).
  void count_to(uint32_t end);
  uint32_t counted() const { return counted_; }
  // An id's counts over [0, counted): all positions, and the generated ones [prompt_len, counted).
  struct IdCount {
    int32_t id = 0;
    uint32_t all = 0;
    uint32_t generated = 0;
  };
  // Sorted by id, ids with all > 0 only: a row's edits come out sorted without a sort, from one
  // contiguous walk (a map's pointer chasing cost ~10 us per sequence per step at 500 ids).
  const std::vector<IdCount>& counts() const { return counts_; }

 private:
  void add(uint32_t pos, int step);
  uint32_t prompt_len_;
  std::vector<int32_t> tokens_;
  uint32_t counted_ = 0;
  std::vector<IdCount> counts_;
};

// Appends the edits of block row `row`, the logits that pick the token at position `next_pos`
// (so next_pos - prompt_len tokens were generated before it), one per id. With penalties,
// `history` must be counted to next_pos (std::invalid_argument otherwise).
void append_adjust_edits(const LogitAdjust& adjust, const TokenHistory* history, uint32_t row, uint32_t next_pos,
                         std::vector<LogitEdit>* edits);

}  // namespace ds
