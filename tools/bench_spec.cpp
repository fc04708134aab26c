// Speculative-decoding step costs (see bench_spec.h).
#include "tools/bench_spec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "common/model_config.h"
#include "worker/stage_model.h"

namespace ds::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One forward of `tokens` at `pos`, logits on every row from `first_logit` on; final hidden of
// every row when `all_hidden` (what a speculating step asks for).
StepOutput forward(StageModel& m, uint64_t seq, uint32_t pos, const std::vector<int32_t>& tokens, uint32_t n_draft,
                   uint32_t first_logit, bool all_hidden, bool greedy_digest = false) {
  StepInput in;
  SeqStep s{seq, pos, tokens, {}};
  for (uint32_t r = first_logit; r < tokens.size(); ++r) s.logit_rows.push_back(r);
  s.n_draft = n_draft;
  in.seqs.push_back(std::move(s));
  in.all_final_hidden = all_hidden;
  if (greedy_digest) in.digest_rows.assign(in.seqs[0].logit_rows.size(), DigestRequest{});
  StepOutput out;
  m.forward(in, &out);
  return out;
}

}  // namespace

SpecCosts measure_spec_costs(StageModel& model, const ModelConfig& cfg, const std::vector<int32_t>& prompt,
                             uint32_t spec_k, int iters, uint64_t seq_id,
                             const std::function<void(bool)>& around_verify) {
  if (spec_k == 0 || spec_k > 4) throw std::invalid_argument("--spec-k must be 1..4");
  if (prompt.empty() || !model.is_first() || !model.is_last())
    throw std::invalid_argument("spec bench: one whole-model stage");
  const size_t D = cfg.n_embd;
  const auto n = static_cast<uint32_t>(prompt.size());
  StepOutput pre = forward(model, seq_id, 0, prompt, 0, n - 1, true);
  // MTP catch-up over the prompt (row p = token p, hidden of p - 1), so drafts have a cache.
  std::vector<float> h(n * D, 0.0f);
  std::copy(pre.final_hidden.begin(), pre.final_hidden.end() - static_cast<std::ptrdiff_t>(D),
            h.begin() + static_cast<std::ptrdiff_t>(D));
  std::vector<float> logits, m_out;
  model.forward_mtp(seq_id, 0, prompt, h.data(), &logits, &m_out);
  const std::vector<float> h_row(pre.final_hidden.end() - static_cast<std::ptrdiff_t>(D), pre.final_hidden.end());

  std::vector<double> decode, verify, mtp_row, mtp_first, decode_d, verify_d, mtp_row_d, mtp_first_d;
  const DigestRequest greedy{};
  LogitDigest digest;
  std::vector<float> last_hidden;
  uint32_t pos = n;
  const int32_t tok = prompt.back();
  const std::vector<int32_t> verify_tokens(spec_k + 1, tok);
  const std::vector<int32_t> first_ids(spec_k + 2, tok);  // catch-up of 1 + K rows + the first draft row
  std::vector<float> first_h((spec_k + 2) * D);
  for (size_t r = 0; r < spec_k + 2; ++r)
    std::copy(h_row.begin(), h_row.end(), first_h.begin() + static_cast<std::ptrdiff_t>(r * D));
  for (int it = 0; it < iters; ++it) {
    auto t0 = Clock::now();
    forward(model, seq_id, pos, {tok}, 0, 0, false);
    decode.push_back(ms_since(t0));
    ++pos;
    t0 = Clock::now();
    forward(model, seq_id, pos, verify_tokens, spec_k, 0, true);
    verify.push_back(ms_since(t0));
    // The MTP rows of this verify step (every draft accepted), then K - 1 chained draft rows.
    t0 = Clock::now();
    model.forward_mtp(seq_id, pos - 1, first_ids, first_h.data(), &logits, &m_out);
    mtp_first.push_back(ms_since(t0));
    uint32_t mtp_pos = pos - 1 + spec_k + 2;
    t0 = Clock::now();
    model.forward_mtp(seq_id, mtp_pos, {tok}, h_row.data(), &logits, &m_out);
    mtp_row.push_back(ms_since(t0));
    pos += spec_k + 1;
    // The greedy worker path over the same shapes (positions advance the same way).
    t0 = Clock::now();
    forward(model, seq_id, pos, {tok}, 0, 0, false, true);
    decode_d.push_back(ms_since(t0));
    ++pos;
    if (around_verify) around_verify(true);
    t0 = Clock::now();
    forward(model, seq_id, pos, verify_tokens, spec_k, 0, true, true);
    verify_d.push_back(ms_since(t0));
    if (around_verify) around_verify(false);
    t0 = Clock::now();
    model.forward_mtp_last(seq_id, pos - 1, first_ids, first_h.data(), &greedy, &digest, &logits, &last_hidden);
    mtp_first_d.push_back(ms_since(t0));
    mtp_pos = pos - 1 + spec_k + 2;
    t0 = Clock::now();
    model.forward_mtp_last(seq_id, mtp_pos, {tok}, h_row.data(), &greedy, &digest, &logits, &last_hidden);
    mtp_row_d.push_back(ms_since(t0));
    pos += spec_k + 1;
  }
  SpecCosts c;
  c.decode_ms = median(decode);
  c.verify_ms = median(verify);
  c.mtp_row_ms = median(mtp_row);
  c.mtp_first_ms = median(mtp_first);
  c.decode_digest_ms = median(decode_d);
  c.verify_digest_ms = median(verify_d);
  c.mtp_row_digest_ms = median(mtp_row_d);
  c.mtp_first_digest_ms = median(mtp_first_d);
  return c;
}

void print_spec_costs(const SpecCosts& c, uint32_t spec_k, size_t context, bool json) {
  const double mtp = c.mtp_first_ms + (spec_k - 1) * c.mtp_row_ms;  // all MTP work of one step
  const double step = c.verify_ms + mtp;
  const double break_even = c.decode_ms > 0 ? step / c.decode_ms : 0;  // tokens per step to pay off
  if (json) {
    std::printf(
        "{\"test\":\"spec\",\"spec_k\":%u,\"n_depth\":%zu,\"decode_ms\":%.4f,\"verify_ms\":%.4f,"
        "\"mtp_row_ms\":%.4f,\"mtp_first_ms\":%.4f,\"spec_step_ms\":%.4f,\"break_even_tokens_per_step\":%.3f,"
        "\"decode_digest_ms\":%.4f,\"verify_digest_ms\":%.4f,\"mtp_row_digest_ms\":%.4f,\"mtp_first_digest_ms\":%.4f}"
        "\n",
        spec_k, context, c.decode_ms, c.verify_ms, c.mtp_row_ms, c.mtp_first_ms, step, break_even, c.decode_digest_ms,
        c.verify_digest_ms, c.mtp_row_digest_ms, c.mtp_first_digest_ms);
    return;
  }
  std::printf(
      "spec K=%u at context %zu: decode %.3f ms | verify 1+%u %.3f ms (%.2fx) | MTP draft row %.3f ms (%.2fx), "
      "first MTP call (%u rows) %.3f ms | step %.3f ms (%.2fx): pays off above %.2f tokens/step\n",
      spec_k, context, c.decode_ms, spec_k, c.verify_ms, c.verify_ms / c.decode_ms, c.mtp_row_ms,
      c.mtp_row_ms / c.decode_ms, spec_k + 2, c.mtp_first_ms, step, step / c.decode_ms, break_even);
  const double dd = c.decode_digest_ms;
  std::printf(
      "spec K=%u greedy, device digests: decode %.3f ms | verify 1+%u %.3f ms (%.2fx) | MTP draft row %.3f ms "
      "(%.2fx), first MTP call %.3f ms (%.2fx) | step %.3f ms (%.2fx)\n",
      spec_k, dd, spec_k, c.verify_digest_ms, c.verify_digest_ms / dd, c.mtp_row_digest_ms, c.mtp_row_digest_ms / dd,
      c.mtp_first_digest_ms, c.mtp_first_digest_ms / dd,
      c.verify_digest_ms + c.mtp_first_digest_ms + (spec_k - 1) * c.mtp_row_digest_ms,
      (c.verify_digest_ms + c.mtp_first_digest_ms + (spec_k - 1) * c.mtp_row_digest_ms) / dd);
}

}  // namespace ds::bench
