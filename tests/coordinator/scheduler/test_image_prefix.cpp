// The prefix cache with images (issue 31): blocks and GDN snapshots are keyed by token ids plus
// image content, so a prompt with the same image hits and one with another image (the same pad
// tokens) never does; every row of a sequence with images names them.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "coordinator/scheduler/prefix_cache.h"
#include "coordinator/scheduler/scheduler.h"

namespace ds {
namespace {

constexpr int32_t kPad = 9;

// 2 text tokens, an image of 2x4 = 8 pads at position 2, then 6 text tokens: 16 tokens.
std::vector<int32_t> prompt() {
  std::vector<int32_t> p = {1, 2};
  p.insert(p.end(), 8, kPad);
  for (int32_t t = 3; t < 9; ++t) p.push_back(t);
  return p;
}

GenerationRequest request(const std::string& id, uint64_t image_hash) {
  GenerationRequest r;
  r.request_id = id;
  r.prompt_ids = prompt();
  r.sampling.max_tokens = 2;
  r.sampling.ignore_eos = true;
  r.images.push_back({ImageSpan{2, 2, 4, image_hash}, std::make_shared<RgbImage>()});
  return r;
}

SchedulerConfig config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.max_seqs = 4;
  c.max_context = 128;
  c.num_snapshots = 8;
  c.eos_token_ids = {0};
  return c;
}

std::vector<uint64_t> block_hashes(const std::vector<int32_t>& keys) {
  std::vector<uint64_t> out;
  uint64_t parent = 42;
  for (size_t k = 0; k + 4 <= keys.size(); k += 4) {
    parent = hash_block(parent, std::span<const int32_t>(keys).subspan(k, 4));
    out.push_back(parent);
  }
  return out;
}

TEST(ImagePrefixKeys, SameImageSameKeysOtherImageOthers) {
  const std::vector<int32_t> p = prompt();
  const std::vector<ImageSpan> a = {{2, 2, 4, 0xaaaa}}, b = {{2, 2, 4, 0xbbbb}};
  const std::vector<int32_t> ka = image_key_tokens(p, a, 7), kb = image_key_tokens(p, b, 7);
  EXPECT_EQ(ka, image_key_tokens(p, a, 7));
  for (size_t i = 0; i < p.size(); ++i) {
    const bool pad = i >= 2 && i < 10;
    EXPECT_EQ(ka[i] < 0, pad) << i;  // image positions take ids no real token has
    if (pad) {
      EXPECT_NE(ka[i], kb[i]);
    } else {
      EXPECT_EQ(ka[i], p[i]);
    }
  }
  EXPECT_EQ(block_hashes(ka), block_hashes(image_key_tokens(p, a, 7)));
  const std::vector<uint64_t> ha = block_hashes(ka), hb = block_hashes(kb);
  for (size_t k = 0; k < ha.size(); ++k)
    EXPECT_NE(ha[k], hb[k]) << "block " << k;                       // each holds image tokens or follows one
  EXPECT_NE(image_key_tokens(p, a, 7), image_key_tokens(p, a, 8));  // keyed by the server's seed
}

// Runs every request to completion; returns the first row of each in planning order.
std::vector<ScheduledSeq> run(Scheduler& s) {
  std::vector<ScheduledSeq> first;
  std::set<std::string> seen;
  for (;;) {
    const StepPlan plan = s.schedule();
    if (plan.empty()) break;
    SampledStep out{plan.step_id, std::vector<int32_t>(plan.seqs.size(), 1)};
    for (const ScheduledSeq& row : plan.seqs) {
      if (seen.insert(row.request_id).second) first.push_back(row);
      // Every row names the images that start before its end.
      EXPECT_EQ(row.images.size(), row.start_pos + row.token_ids.size() > 2 ? 1u : 0u);
    }
    s.update_from_output(out);
  }
  return first;
}

TEST(ImagePrefixKeys, SchedulerHitsOnlyTheSameImage) {
  Scheduler s(config());
  s.add_request(request("a", 0xaaaa));
  run(s);
  s.add_request(request("same", 0xaaaa));
  EXPECT_EQ(run(s).at(0).start_pos, 12u);  // the last block boundary before the prompt's end
  s.add_request(request("other", 0xbbbb));
  EXPECT_EQ(run(s).at(0).start_pos, 0u);
  EXPECT_EQ(s.check_invariants(), "");
}

TEST(ImagePrefixKeys, ImagesOutsideThePromptAreRefused) {
  Scheduler s(config());
  GenerationRequest r = request("a", 1);
  r.images[0].span.first_pos = 10;  // 8 tokens from 10 end past 16
  EXPECT_THROW(s.add_request(r), std::invalid_argument);
  r = request("b", 1);
  r.images[0].pixels.reset();
  EXPECT_THROW(s.add_request(r), std::invalid_argument);
}

}  // namespace
}  // namespace ds
