#include "worker/blocks/step_layout.h"

#include <string>

#include "common/error.h"

namespace ds {

namespace {

void check_drafts(const SeqStep& s, const StepLimits& limits, const std::string& who) {
  if (limits.max_drafts == 0) {
    if (s.n_draft != 0 || s.rewind)
      throw ConfigError(who + ": " + limits.arch + " has no MTP block, so no drafts to verify");
  } else if (s.n_draft > limits.max_drafts || s.n_draft >= s.n_tokens()) {
    throw ConfigError(who + ": too many drafts");
  }
}

void check_images(const SeqStep& s, const StepLimits& limits, const std::string& who) {
  if (s.images.empty()) return;
  if (!limits.images) throw ConfigError(who + ": " + limits.arch + " takes no images");
  if (const char* problem = image_spans_problem(s.images)) throw ConfigError(who + ": " + problem);
}

}  // namespace

void check_step(const StepInput& in, const StepLimits& limits, const StageCache& cache) {
  if (in.seqs.empty()) throw ConfigError("empty step");
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const SeqStep& s = in.seqs[i];
    const std::string who = "sequence " + std::to_string(s.seq_id);
    if (s.token_ids.empty()) throw ConfigError(who + ": no tokens");
    for (size_t j = 0; j < i; ++j) {
      if (in.seqs[j].seq_id == s.seq_id) throw ConfigError(who + " appears twice in one step");
    }
    for (int32_t id : s.token_ids) {
      if (id < 0 || static_cast<uint32_t>(id) >= limits.n_vocab)
        throw ConfigError(who + ": token id " + std::to_string(id) + " out of range");
    }
    for (uint32_t r : s.logit_rows) {
      if (r >= s.n_tokens()) throw ConfigError(who + ": logit row " + std::to_string(r) + " outside the step");
    }
    check_drafts(s, limits, who);
    check_images(s, limits, who);
    if (limits.max_context && size_t{s.start_pos} + s.n_tokens() > limits.max_context) {
      throw ConfigError(who + ": exceeds the context limit of " + std::to_string(limits.max_context));
    }
  }
  cache.check_step(in);
}

void fill_positions(const std::vector<SeqSpan>& spans, size_t T, const StageCache& cache,
                    std::vector<int32_t>* positions, std::vector<uint32_t>* kv_rows) {
  positions->resize(3 * T);
  kv_rows->clear();
  int32_t* p = positions->data();
  for (const SeqSpan& s : spans) {
    if (s.images != nullptr) {
      mrope_positions(*s.images, s.start_pos, s.n_tokens, p + s.offset, p + T + s.offset, p + 2 * T + s.offset);
    } else {
      for (size_t j = 0; j < s.n_tokens; ++j) {
        const auto pos = static_cast<int32_t>(s.start_pos + j);
        for (size_t stream = 0; stream < 3; ++stream) p[stream * T + s.offset + j] = pos;
      }
    }
    cache.append_pool_rows(*s.seq, s.start_pos, s.n_tokens, kv_rows);
  }
}

WeightView stack_weights(Backend& be, const GgufFile& gguf, const std::vector<std::string>& names,
                         const std::vector<WeightView*>& parts) {
  std::vector<const GgufTensor*> tensors;
  for (const std::string& n : names) tensors.push_back(&gguf.tensor(n));
  const WeightView all = be.weight_stack(tensors.data(), tensors.size());
  size_t first = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    *parts[i] = all.data != nullptr ? cpu::row_range(all, first, tensors[i]->n_rows()) : be.weight(*tensors[i]);
    first += tensors[i]->n_rows();
  }
  return all;
}

std::vector<SeqSpan> lay_out_step(const StepInput& in, StageCache& cache, std::vector<int32_t>* positions,
                                  std::vector<uint32_t>* kv_rows) {
  const std::vector<StageCache::Seq*> seqs = cache.begin_step(in);
  std::vector<SeqSpan> spans;
  size_t T = 0;
  for (size_t i = 0; i < in.seqs.size(); ++i) {
    const SeqStep& s = in.seqs[i];
    seqs[i]->images = s.images;  // for the MTP rows after this step
    spans.push_back({seqs[i], T, s.n_tokens(), s.start_pos, s.n_draft, s.images.empty() ? nullptr : &s.images});
    T += s.n_tokens();
  }
  fill_positions(spans, T, cache, positions, kv_rows);
  return spans;
}

}  // namespace ds
