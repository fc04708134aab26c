// Layout planning (see layout.h).
#include "coordinator/engine/layout.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/gguf.h"
#include "common/model_config.h"

namespace ds {

uint64_t last_stage_extra_bytes(const GgufFile& gguf, uint32_t n_layer, uint32_t spec_k, uint32_t draft_vocab) {
  ModelConfig cfg;
  cfg.n_layer = n_layer;
  uint64_t head = 0, embeddings = 0, norm = 0, mtp = 0, vocab = 0;
  for (const GgufTensor& t : gguf.tensors()) {
    const TensorPlace p = tensor_place(t.name, cfg);
    if (p.role == TensorRole::kHead && t.name == "output.weight") head = t.nbytes;
    if (p.role == TensorRole::kEmbedding && t.name == "token_embd.weight") embeddings = t.nbytes, vocab = t.n_rows();
    if (p.role == TensorRole::kFinalNorm && t.name == "output_norm.weight") norm = t.nbytes;
    if (p.role == TensorRole::kMtp && p.layer == n_layer) mtp += t.nbytes;  // the first MTP block drafts
  }
  const uint64_t lm_head = (head != 0 ? head : embeddings) + norm;
  // A draft reads the head's first draft_vocab rows only.
  const uint64_t draft_head =
      draft_vocab == 0 || vocab == 0 || draft_vocab >= vocab ? lm_head : lm_head * draft_vocab / vocab;
  return lm_head + uint64_t{spec_k} * (mtp + draft_head);
}

std::vector<StageRange> plan_balanced_layout(const std::vector<uint64_t>& layer_bytes, uint32_t n_stages,
                                             uint64_t last_stage_extra) {
  const size_t n = layer_bytes.size();
  if (n_stages == 0 || n_stages > n) {
    throw ConfigError("cannot split " + std::to_string(n) + " layers into " + std::to_string(n_stages) + " stages");
  }
  std::vector<uint64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_bytes[i];
  // best[s][i]: smallest possible max-stage bytes covering layers [0, i) with s stages.
  constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<uint64_t>> best(n_stages + 1, std::vector<uint64_t>(n + 1, kInf));
  std::vector<std::vector<size_t>> cut(n_stages + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (uint32_t s = 1; s <= n_stages; ++s) {
    for (size_t i = s; i <= n; ++i) {
      const uint64_t extra = s == n_stages ? last_stage_extra : 0;
      for (size_t j = s - 1; j < i; ++j) {  // last stage covers [j, i)
        if (best[s - 1][j] == kInf) continue;
        const uint64_t cost = std::max(best[s - 1][j], prefix[i] - prefix[j] + extra);
        if (cost < best[s][i]) {
          best[s][i] = cost;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<StageRange> layout(n_stages);
  size_t end = n;
  for (uint32_t s = n_stages; s >= 1; --s) {
    const size_t begin = cut[s][end];
    layout[s - 1] = StageRange{static_cast<uint32_t>(begin), static_cast<uint32_t>(end)};
    end = begin;
  }
  return layout;
}

std::vector<StageRange> layout_from_counts(const std::vector<uint32_t>& counts, uint32_t n_layer) {
  std::vector<StageRange> layout;
  uint32_t first = 0;
  for (uint32_t c : counts) {
    if (c == 0) throw ConfigError("layer split: every stage needs at least one layer");
    layout.push_back(StageRange{first, first + c});
    first += c;
  }
  if (first != n_layer) {
    throw ConfigError("layer split covers " + std::to_string(first) + " layers, the model has " +
                      std::to_string(n_layer));
  }
  return layout;
}

std::vector<StageRange> parse_layer_split(const std::string& spec, uint32_t n_layer) {
  std::vector<uint32_t> counts;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v > n_layer)
      throw ConfigError("layer split: bad count '" + item + "' in '" + spec + "'");
    counts.push_back(static_cast<uint32_t>(v));
  }
  if (counts.empty()) throw ConfigError("layer split is empty");
  return layout_from_counts(counts, n_layer);
}

std::string describe_layout(const std::vector<StageRange>& layout) {
  std::ostringstream s;
  for (size_t i = 0; i < layout.size(); ++i) {
    s << (i ? " " : "") << "stage" << i << "=[" << layout[i].first_layer << "," << layout[i].last_layer << ")";
  }
  return s.str();
}

}  // namespace ds
