#include "tests/worker/spec_harness.h"

#include "tests/worker/model_harness.h"
#include "worker/speculation.h"

namespace ds::test {
namespace {

std::vector<float> row_of(const std::vector<float>& logits, size_t r, size_t V) {
  return {logits.begin() + static_cast<std::ptrdiff_t>(r * V),
          logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * V)};
}

// The next drafts: the MTP block's, or the oracle's continuation with every third corrupted.
std::vector<int32_t> next_drafts(const SpecRowOutput& o, const Generated& g, uint32_t K, size_t V,
                                 const std::vector<int32_t>* oracle, uint32_t* corrupt) {
  if (oracle == nullptr) return o.drafts;
  std::vector<int32_t> drafts;
  for (uint32_t j = 0; j < K && g.tokens.size() + j < oracle->size(); ++j) {
    const int32_t t = (*oracle)[g.tokens.size() + j];
    drafts.push_back(++*corrupt % 3 == 0 ? (t + 1) % static_cast<int32_t>(V) : t);
  }
  return drafts;
}

}  // namespace

Generated greedy_plain_decode(StageModel& stage, size_t n_vocab, const std::vector<int32_t>& prompt,
                              size_t n_generate) {
  Generated g;
  std::vector<float> logits = run_prompt(stage, 1, prompt, {static_cast<uint32_t>(prompt.size() - 1)});
  for (size_t i = 0; i < n_generate; ++i) {
    g.logits.push_back(logits);
    g.tokens.push_back(argmax(logits.data(), n_vocab));
    StepInput in;
    in.seqs.push_back({1, static_cast<uint32_t>(prompt.size() + i), {g.tokens.back()}, {0}});
    StepOutput out;
    stage.forward(in, &out);
    logits = out.logits;
  }
  return g;
}

Generated greedy_spec_decode(StageModel& stage, size_t n_embd, size_t n_vocab, const std::vector<int32_t>& prompt,
                             uint32_t K, const std::vector<int32_t>* oracle, size_t n_generate, bool ask_digests) {
  const size_t V = n_vocab;
  SpecDecoder spec(stage, n_embd, V);
  Generated g;
  SeqStep step{1, 0, prompt, {static_cast<uint32_t>(prompt.size() - 1)}};
  uint32_t corrupt = 0;
  while (g.tokens.size() < n_generate) {
    StepInput in;
    in.seqs.push_back(step);
    in.all_final_hidden = true;
    if (ask_digests) in.digest_rows.assign(step.logit_rows.size(), DigestRequest{});  // greedy rule
    StepOutput out;
    stage.forward(in, &out);
    const bool digested = !out.digests.empty();
    g.digested_steps += digested ? 1 : 0;
    const auto target_row = [&](uint32_t j) { return digested ? std::vector<float>{} : row_of(out.logits, j, V); };
    SpecRowInput r;
    r.seq_id = 1;
    r.start_pos = step.start_pos;
    r.tokens = step.token_ids;
    r.n_draft = step.n_draft;
    if (digested)
      r.target_digests = out.digests.data();
    else
      r.target_logits = out.logits.data();
    r.final_hidden = out.final_hidden.data();
    r.spec_k = K;
    r.u_accept.assign(step.n_draft, 0.5);
    r.u_draft.assign(K, 0.5);
    const SpecRowOutput o = spec.run(r);
    for (int32_t d : o.drafts) g.max_draft = std::max(g.max_draft, d);
    g.drafted += step.n_draft;
    g.accepted += o.accepted;
    const size_t first = step.token_ids.size() - 1 - step.n_draft;
    for (uint32_t j = 0; j < o.accepted; ++j) {
      g.tokens.push_back(step.token_ids[first + 1 + j]);
      g.logits.push_back(target_row(j));
    }
    g.tokens.push_back(o.token);
    g.logits.push_back(target_row(o.accepted));
    const uint32_t next = step.start_pos + static_cast<uint32_t>(step.token_ids.size()) - step.n_draft + o.accepted;
    const std::vector<int32_t> drafts = next_drafts(o, g, K, V, oracle, &corrupt);
    step = SeqStep{1, next, {o.token}, {}};
    step.token_ids.insert(step.token_ids.end(), drafts.begin(), drafts.end());
    for (uint32_t j = 0; j < step.token_ids.size(); ++j) step.logit_rows.push_back(j);
    step.n_draft = static_cast<uint32_t>(drafts.size());
    step.rewind = o.accepted < r.n_draft;
  }
  g.tokens.resize(n_generate);
  g.logits.resize(n_generate);
  return g;
}

}  // namespace ds::test
