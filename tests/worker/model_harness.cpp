#include "tests/worker/model_harness.h"

#include <algorithm>

#include "tests/testutil/testutil.h"

namespace ds::test {

LoadedModel load_fixture(bool keep_all_hidden, StageRange range, CacheGeometry cache, uint32_t draft_vocab) {
  LoadedModel m;
  m.gguf = std::make_shared<const GgufFile>(GgufFile::open(tiny_model_path()));
  m.config = load_model_config(*m.gguf);
  if (range.last_layer == 0) range = {0, m.config.n_layer};
  StageOptions o;
  o.n_threads = 2;
  o.keep_all_hidden = keep_all_hidden;
  o.cache = cache;
  o.draft_vocab = draft_vocab;
  m.stage = load_cpu_stage(m.gguf, m.config, range, o);
  return m;
}

LoadedModel load_data_model(const std::string& file, CacheGeometry cache) {
  LoadedModel m;
  m.gguf = std::make_shared<const GgufFile>(GgufFile::open(data_path(file)));
  m.config = load_model_config(*m.gguf);
  StageOptions o;
  o.n_threads = 2;
  o.cache = cache;
  m.stage = load_cpu_stage(m.gguf, m.config, {0, m.config.n_layer}, o);
  return m;
}

std::vector<int32_t> greedy_tokens(StageModel& m, size_t n_vocab, uint64_t seq_id, const std::vector<int32_t>& prompt,
                                   size_t n_tokens) {
  std::vector<float> logits = run_prompt(m, seq_id, prompt, {static_cast<uint32_t>(prompt.size() - 1)});
  std::vector<int32_t> got;
  uint32_t pos = static_cast<uint32_t>(prompt.size());
  for (size_t step = 0; step < n_tokens; ++step) {
    const int32_t next = argmax(logits.data(), n_vocab);
    got.push_back(next);
    StepInput in;
    in.seqs.push_back({seq_id, pos++, {next}, {0}});
    StepOutput out;
    m.forward(in, &out);
    logits = out.logits;
  }
  return got;
}

std::vector<float> run_prompt(StageModel& m, uint64_t seq_id, const std::vector<int32_t>& ids,
                              const std::vector<uint32_t>& rows, size_t chunk, std::vector<float>* final_hidden) {
  std::vector<float> logits;
  if (chunk == 0) chunk = ids.size();
  size_t w = 0;
  for (size_t begin = 0; begin < ids.size(); begin += chunk) {
    const size_t end = std::min(ids.size(), begin + chunk);
    StepInput in;
    SeqStep s;
    s.seq_id = seq_id;
    s.start_pos = static_cast<uint32_t>(begin);
    s.token_ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                       ids.begin() + static_cast<std::ptrdiff_t>(end));
    for (; w < rows.size() && rows[w] < end; ++w) s.logit_rows.push_back(static_cast<uint32_t>(rows[w] - begin));
    in.seqs.push_back(std::move(s));
    StepOutput out;
    m.forward(in, &out);
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    if (final_hidden) final_hidden->insert(final_hidden->end(), out.final_hidden.begin(), out.final_hidden.end());
  }
  return logits;
}

std::vector<float> mtp_rows_for_prompt(StageModel& m, size_t n_embd, uint64_t seq_id,
                                       const std::vector<int32_t>& prompt) {
  const size_t n = prompt.size();
  std::vector<float> hidden;
  run_prompt(m, seq_id, prompt, all_rows(n), 0, &hidden);
  std::vector<float> h(n * n_embd, 0.0f);
  std::copy(hidden.begin(), hidden.begin() + static_cast<std::ptrdiff_t>((n - 1) * n_embd),
            h.begin() + static_cast<std::ptrdiff_t>(n_embd));
  return h;
}

std::vector<uint32_t> all_rows(size_t n) {
  std::vector<uint32_t> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = static_cast<uint32_t>(i);
  return r;
}

int32_t argmax(const float* x, size_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

}  // namespace ds::test
