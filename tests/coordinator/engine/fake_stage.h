// A deterministic fake StageModel for tests that do not need the real model: per-sequence
// state that depends on every token seen, so lost or replayed state changes the output.
#pragma once

#include <cmath>
#include <map>
#include <stdexcept>

#include "worker/backend.h"
#include "worker/stage_model.h"

namespace ds::test {

class FakeStage : public StageModel {
 public:
  static constexpr uint32_t kEmbd = 4;
  static constexpr uint32_t kVocab = 32;
  FakeStage(StageRange range, uint32_t n_layer) : range_(range), n_layer_(n_layer) {}
  const StageRange& range() const override { return range_; }
  bool is_first() const override { return range_.first_layer == 0; }
  bool is_last() const override { return range_.last_layer == n_layer_; }

  void forward(const StepInput& in, StepOutput* out) override {
    last_cache_ = in.cache;
    last_digest_rows_ = in.digest_rows.size();
    for (const SeqStep& s : in.seqs) {
      auto it = held_.find(s.seq_id);
      if (s.start_pos != 0 && (it == held_.end() || it->second.first != s.start_pos)) {
        throw std::invalid_argument("fake stage: unknown position for sequence");
      }
    }
    rows_.clear();
    out->logits.clear();
    size_t row = 0;
    for (const SeqStep& s : in.seqs) {
      auto& [pos, acc] = held_[s.seq_id];
      if (s.start_pos == 0) acc = 0;
      std::vector<float> seq_hidden;
      for (uint32_t i = 0; i < s.n_tokens(); ++i, ++row) {
        float h[kEmbd];
        for (uint32_t d = 0; d < kEmbd; ++d) {
          h[d] = !is_first() ? input_[row * kEmbd + d] : static_cast<float>(s.token_ids[i] % 97) * 0.01f * (d + 1);
        }
        acc = acc * 0.5f + h[0] + static_cast<float>(range_.first_layer);
        for (uint32_t d = 0; d < kEmbd; ++d) h[d] += acc * 0.125f * static_cast<float>(d + 1);
        seq_hidden.insert(seq_hidden.end(), h, h + kEmbd);
      }
      pos = s.start_pos + s.n_tokens();
      rows_.insert(rows_.end(), seq_hidden.begin(), seq_hidden.end());
      if (!is_last()) continue;
      for (uint32_t r : s.logit_rows) {
        const float* h = &seq_hidden[r * kEmbd];
        for (uint32_t v = 0; v < kVocab; ++v)
          out->logits.push_back(std::sin(h[1] * 3.1f + static_cast<float>(v) * 0.7f));
      }
    }
    if (is_last() && !in.logit_edits.empty()) {
      backend_->edit_logits(out->logits.data(), out->logits.size() / kVocab, kVocab, in.logit_edits.data(),
                            in.logit_edits.size());
    }
    if (is_last() && !in.token_masks.get().empty()) {
      backend_->mask_logits(out->logits.data(), out->logits.size() / kVocab, kVocab, in.token_masks.get());
    }
    // The speculation tests read every row's final hidden (MTP catch-up input) from here.
    out->final_hidden = is_last() && in.all_final_hidden ? rows_ : std::vector<float>{};
    out->digests.clear();
    if (digest_in_model && !in.digest_rows.empty()) {  // like a device digest: digests, no logits
      for (size_t r = 0; r < in.digest_rows.size(); ++r) {
        const DigestRequest& q = in.digest_rows[r];
        out->digests.push_back(digest_logits(out->logits.data() + r * kVocab, kVocab, q.rule, q.u));
      }
      out->digest_n_vocab = kVocab;
      out->logits.clear();
    }
  }
  // Honour StepInput::digest_rows the way the CUDA backend does (tests of the digest path).
  bool digest_in_model = false;
  size_t last_digest_rows() const { return last_digest_rows_; }
  // A stand-in MTP block: row i's logits peak at token (3 * token_ids[i] + 1) mod kVocab, so
  // drafts are deterministic; the normed output is zero. Counts its rows.
  void forward_mtp(uint64_t, uint32_t, const std::vector<int32_t>& token_ids, const float*, std::vector<float>* logits,
                   std::vector<float>* out_hidden) override {
    if (!is_last()) throw std::logic_error("fake stage: MTP on a stage that is not the last");
    logits->clear();
    for (int32_t t : token_ids) {
      const int32_t peak = (3 * t + 1) % static_cast<int32_t>(kVocab);
      for (uint32_t v = 0; v < kVocab; ++v)
        logits->push_back(-std::fabs(static_cast<float>(static_cast<int32_t>(v) - peak)));
    }
    if (out_hidden != nullptr) out_hidden->assign(token_ids.size() * kEmbd, 0.0f);
    mtp_rows_ += token_ids.size();
  }
  size_t mtp_rows() const { return mtp_rows_; }
  void drop_sequence(uint64_t id) override {
    held_.erase(id);
    dropped_.push_back(id);
  }
  void drop_all() override { held_.clear(); }
  const std::vector<std::vector<float>>& layer_hidden() const override { return none_; }
  // Host rows on a CPU backend: its uploads and downloads are plain copies.
  Backend& backend() override { return *backend_; }
  float* input_rows(size_t n_tokens) override {
    input_.resize(n_tokens * kEmbd);
    return input_.data();
  }
  const float* output_rows() const override { return rows_.data(); }
  size_t n_held() const { return held_.size(); }
  const std::vector<SeqCache>& last_cache() const { return last_cache_; }  // placements of the last step
  const std::vector<uint64_t>& dropped() const { return dropped_; }

 private:
  StageRange range_;
  uint32_t n_layer_;
  std::map<uint64_t, std::pair<uint32_t, float>> held_;  // seq -> (positions held, accumulator)
  std::vector<std::vector<float>> none_;
  std::unique_ptr<Backend> backend_ = make_cpu_backend(1);
  std::vector<float> input_, rows_;
  std::vector<SeqCache> last_cache_;
  size_t last_digest_rows_ = 0;
  size_t mtp_rows_ = 0;
  std::vector<uint64_t> dropped_;
};

}  // namespace ds::test
