// deltaserve-perplexity's computation, callable from tests: the windows, the perplexity, the
// KL divergence against a saved base run, and the base file.
//
// Perplexity: the token ids are cut into consecutive windows of `ctx` tokens (the last one may be
// shorter); each window is a fresh sequence (no state carried over from the previous window), and
// within it every position t after the first, t = 1 .. n-1, predicts the token at t, from the
// logits row of position t-1. ppl = exp(mean over all predicted positions of
// -log softmax(logits)[next id]), the log-softmax in double. A window of one token predicts nothing.
//
// Base file (--save-base / --kl-base), little-endian, what KL needs per predicted position:
//   header: magic "DSPPLKL1", u32 version, u32 n_vocab, u64 n_positions, u64 n_ids, u32 ctx,
//           u32 reserved (0), u64 ids_hash (FNV-1a 64 over the ids' int32 bytes)
//   then per position: f64 nll (-log p[next], exact), f32 logsumexp of the logits, i32 argmax,
//           n_vocab f16 log-probs (log softmax, clamped to [-65504, 0]).
// Error bound: each stored log-prob lp is within u|lp| of the exact one, u = 2^-11 (f16 rounding
// to nearest, after an f32 step that adds at most 2^-24 relative). The reader renormalises the
// row, so the base distribution is a proper one; against the very run that wrote it,
// KL(base || run) = E_p~[d] - log E_p[e^d] ~ Var_p(d)/2 <= u^2 E_p[lp^2] / 2 per position
// (d: the rounding errors), ~1.2e-7 E_p[lp^2], a few 1e-6 for entropies of a few nats. The
// base's nll and argmax are stored exactly, so its ppl and the top-1 agreement are not rounded.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ds {
class StageModel;
}

namespace ds::ppl {

// A runtime failure the tool reports with exit status 1 (bad file, mismatching base).
struct PplError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Window {
  size_t begin = 0;     // index of the window's first id
  size_t n_tokens = 0;  // ids in the window
};

// The windows of `n_ids` ids, `ctx` each (the last one may be shorter). ctx 0: one window of all
// ids. Throws PplError when n_ids is 0.
std::vector<Window> cut_windows(size_t n_ids, size_t ctx);
// Predicted positions over the windows: sum of (n_tokens - 1).
size_t predicted_positions(const std::vector<Window>& windows);

// FNV-1a 64 over the ids' little-endian int32 bytes.
uint64_t hash_ids(const std::vector<int32_t>& ids);

// One logits row digested: -log softmax[next], the logsumexp and the argmax (first of equals),
// all in double; `log_probs`, when given, receives the n_vocab log-probs.
struct RowStats {
  double nll = 0;
  double logsumexp = 0;
  int32_t argmax = 0;
};
RowStats row_stats(const float* logits, size_t n_vocab, int32_t next, std::vector<double>* log_probs);

struct BaseHeader {
  uint32_t n_vocab = 0;
  uint64_t n_positions = 0;
  uint64_t n_ids = 0;
  uint32_t ctx = 0;  // the window length used (the whole input when it was one window)
  uint64_t ids_hash = 0;
};

// Writes a base file record by record; finish() checks the count and flushes.
class BaseWriter {
 public:
  BaseWriter(const std::string& path, const BaseHeader& header);
  ~BaseWriter();
  void add(const RowStats& row, const std::vector<double>& log_probs);
  void finish();

 private:
  std::string path_;
  BaseHeader header_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
  std::vector<uint16_t> buf_;
};

// One base position read back: the stored statistics and the renormalised log-probs.
struct BaseRow {
  double nll = 0;
  double logsumexp = 0;
  int32_t argmax = 0;
  std::vector<double> log_probs;  // n_vocab, logsumexp 0 (renormalised in double)
  std::vector<double> probs;      // exp(log_probs)
};

// Reads a base file; the constructor checks the magic, version, size and that it was made from
// `expected` (vocabulary, positions, ids, ctx), throwing PplError naming the mismatch.
class BaseReader {
 public:
  BaseReader(const std::string& path, const BaseHeader& expected);
  ~BaseReader();
  // Reads the next position into `row`; throws PplError past the end or on a short read.
  void next(BaseRow* row);

 private:
  std::string path_;
  BaseHeader header_;
  std::FILE* f_ = nullptr;
  uint64_t read_ = 0;
  std::vector<uint16_t> buf_;
};

// The header a base of `ids` in windows of `ctx` (0: one window) must have.
BaseHeader base_header_for(const std::vector<int32_t>& ids, size_t n_vocab, size_t ctx);

// KL(base || run) of one position, in double: sum_i p_i (lb_i - lq_i), p = exp(lb), lb the base's
// renormalised log-probs, lq the run's.
double kl_divergence(const BaseRow& base, const std::vector<double>& run_log_probs);

// The logits of a window: rows for positions 0 .. n_tokens-2 ([n_tokens-1, n_vocab]), computed
// as a fresh sequence. `seq` numbers the windows (0, 1, ...).
using WindowLogits = std::function<void(size_t seq, const std::vector<int32_t>& tokens, std::vector<float>* logits)>;

// Runs the whole model `model` (one stage) over a window, `chunk` tokens per forward step (0: the
// window in one step); sequence id seq+1, dropped afterwards.
WindowLogits stage_logits(StageModel& model, size_t chunk);

struct Options {
  size_t ctx = 0;         // window length; 0: the whole input (callers cap it by the model context)
  std::string save_base;  // write a base file here
  std::string kl_base;    // compare against this base file
};

struct Report {
  size_t n_positions = 0;
  size_t n_windows = 0;
  size_t ctx = 0;  // the window length used
  double ppl = 0;
  bool has_kl = false;  // the rest is filled with Options::kl_base
  double base_ppl = 0;
  double kl_mean = 0;
  double kl_p99 = 0;  // nearest rank: the ceil(0.99 n)-th smallest
  double kl_max = 0;
  double top1_pct = 0;  // positions whose argmax equals the base's, in %
  // The run's KV cache element types (the caller's --kv-cache-type[-k|-v]); empty: not reported.
  std::string type_k, type_v;
};

// The perplexity of `ids` (and the base file / KL per `o`), the logits from `logits`.
Report evaluate(const std::vector<int32_t>& ids, size_t n_vocab, const Options& o, const WindowLogits& logits);

// The report as one JSON object on one line (ppl, n_positions, ...; the KL figures with has_kl).
std::string report_json(const Report& r);

// Token ids from a file's text: a JSON array ("[1, 2, 3]") or whitespace-separated integers.
// Throws PplError naming the first bad item, or when there are none.
std::vector<int32_t> parse_ids(const std::string& text);

}  // namespace ds::ppl
