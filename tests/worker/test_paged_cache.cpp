// Scheduler-managed memory on a stage: sequences whose KV rows sit in scattered pool blocks and
// whose GDN state lives in a slot give the same logits, bit for bit, as the self-managed
// (contiguous-table) stage; a GDN snapshot saved at a block boundary plus the shared prefix
// blocks lets a new sequence skip the prefix exactly; plans that break the pools' rules are
// rejected before any state changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "tests/testutil/reference.h"
#include "tests/worker/model_harness.h"
#include "worker/backend.h"
#include "worker/cache/stage_cache.h"

namespace ds::test {
namespace {

constexpr CacheGeometry kGeometry{16, 64, 4, 3};  // block_size, num_blocks, max_seqs, num_snapshots

// Pool block ids 0..num_blocks-1 in a fixed random order: tables never look contiguous.
std::vector<uint32_t> shuffled_blocks(uint32_t seed) {
  std::vector<uint32_t> ids(kGeometry.num_blocks);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  return ids;
}

std::vector<uint32_t> take(std::vector<uint32_t>& from, size_t n) {
  std::vector<uint32_t> out(from.end() - static_cast<std::ptrdiff_t>(n), from.end());
  from.resize(from.size() - n);
  return out;
}

size_t blocks_for(size_t positions) {
  return (positions + kGeometry.block_size - 1) / kGeometry.block_size;
}

std::vector<int32_t> slice(const std::vector<int32_t>& ids, size_t begin, size_t end) {
  return {ids.begin() + static_cast<std::ptrdiff_t>(begin), ids.begin() + static_cast<std::ptrdiff_t>(end)};
}

// One managed step of one sequence; returns the logits of its last token.
std::vector<float> step(StageModel& m, uint64_t seq, uint32_t start, const std::vector<int32_t>& tokens, SeqCache c) {
  StepInput in;
  in.seqs.push_back({seq, start, tokens, {static_cast<uint32_t>(tokens.size() - 1)}});
  in.cache.push_back(std::move(c));
  StepOutput out;
  m.forward(in, &out);
  return out.logits;
}

SeqCache placement(uint32_t slot, bool is_new, std::vector<uint32_t> blocks) {
  SeqCache c;
  c.state_slot = slot;
  c.is_new = is_new;
  c.block_ids = std::move(blocks);
  return c;
}

// A speculating server's pools (CacheGeometry::captures_per_slot, from Assign.spec_k) hold every
// slot's rollback records from creation, so none is allocated while serving; any other count
// than the layout's kMaxCaptures is refused.
TEST(PagedCache, SpeculatingPoolsHoldRollbackRecordsFromCreation) {
  const std::unique_ptr<Backend> be = make_cpu_backend(1);
  const CacheShapes shapes{1, 8, 2, 6, 10};  // 1 attention layer, 2 GDN layers of 6 + 10 floats
  CacheGeometry g = kGeometry;
  StageCache plain(*be, g, shapes);
  EXPECT_EQ(plain.states().capture_slots(), 0u) << "grown on first use only";
  g.captures_per_slot = StatePool::kMaxCaptures;
  StageCache spec(*be, g, shapes);
  EXPECT_EQ(spec.states().capture_slots(), g.max_seqs);
  // slots + snapshots + 4 records per slot, each 2 * (6 + 10) floats.
  EXPECT_EQ(spec.states().bytes(), (4u + 3u + 4u * 4u) * 32u * sizeof(float));
  g.captures_per_slot = 2;
  EXPECT_THROW(StageCache(*be, g, shapes), ConfigError);
}

TEST(PagedCache, ScatteredBlocksEqualSelfManaged) {
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  LoadedModel plain = load_fixture();
  LoadedModel paged = load_fixture(false, {0, 0}, kGeometry);
  const std::vector<float> want = run_prompt(*plain.stage, 1, ref.ids, {199});

  // Chunks of 48 and 57 and 95 tokens: chunk ends inside blocks, tables grow by deltas.
  std::vector<uint32_t> free = shuffled_blocks(7);
  std::vector<float> got;
  size_t done = 0, held = 0;
  for (size_t end : {48, 105, 200}) {
    const size_t need = blocks_for(end) - held;
    got = step(*paged.stage, 9, static_cast<uint32_t>(done), slice(ref.ids, done, end),
               placement(2, done == 0, take(free, need)));
    held += need;
    done = end;
  }
  EXPECT_EQ(got, want);
}

TEST(PagedCache, InterleavedSequencesInOneBatch) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  LoadedModel plain = load_fixture();
  LoadedModel paged = load_fixture(false, {0, 0}, kGeometry);
  const std::vector<int32_t> a = ref.ids, b = slice(ref.ids, 3, 17);
  const std::vector<float> want_a = run_prompt(*plain.stage, 1, a, {static_cast<uint32_t>(a.size() - 1)});
  const std::vector<float> want_b = run_prompt(*plain.stage, 2, b, {static_cast<uint32_t>(b.size() - 1)});

  // Both sequences prefill token by token in the same steps, taking alternate blocks.
  std::vector<uint32_t> free = shuffled_blocks(11);
  std::vector<size_t> held(2, 0);
  std::vector<float> last_a, last_b;
  const std::vector<const std::vector<int32_t>*> seqs = {&a, &b};
  for (size_t pos = 0; pos < a.size(); ++pos) {
    StepInput in;
    for (size_t i = 0; i < 2; ++i) {
      if (pos >= seqs[i]->size()) continue;
      const size_t need = blocks_for(pos + 1) - held[i];
      held[i] += need;
      in.seqs.push_back({100 + i, static_cast<uint32_t>(pos), {(*seqs[i])[pos]}, {0}});
      in.cache.push_back(placement(static_cast<uint32_t>(3 - i), pos == 0, take(free, need)));
    }
    StepOutput out;
    paged.stage->forward(in, &out);
    const size_t V = paged.config.n_vocab;
    if (pos + 1 == a.size()) last_a = out.logits;
    if (pos + 1 == b.size()) last_b.assign(out.logits.begin() + static_cast<std::ptrdiff_t>(V), out.logits.end());
  }
  EXPECT_EQ(last_a, want_a);
  EXPECT_EQ(last_b, want_b);
}

// Prefill A in two steps cut at a block boundary (128), saving a snapshot there; then B, a new
// sequence with the same first 128 tokens, shares A's first 8 blocks, loads the snapshot and
// computes only the rest: its logits equal a full prefill. For every KV cache type (the shared
// blocks are read as they were written; a hit is exact whatever the encoding).
class PagedCacheKv : public ::testing::TestWithParam<KvType> {};

TEST_P(PagedCacheKv, SnapshotAtBlockBoundaryReplacesThePrefix) {
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  CacheGeometry self_managed, managed = kGeometry;
  self_managed.k_type = self_managed.v_type = managed.k_type = managed.v_type = GetParam();
  LoadedModel plain = load_fixture(false, {0, 0}, self_managed);
  LoadedModel paged = load_fixture(false, {0, 0}, managed);
  std::vector<int32_t> b_ids = slice(ref.ids, 0, 170);
  b_ids.back() = 77;  // B diverges from A after the shared prefix
  const std::vector<float> want_a = run_prompt(*plain.stage, 1, ref.ids, {199});
  const std::vector<float> want_b = run_prompt(*plain.stage, 2, b_ids, {169});

  std::vector<uint32_t> free = shuffled_blocks(3);
  const std::vector<uint32_t> prefix = take(free, 8);
  SeqCache first = placement(0, true, prefix);
  first.save_snapshot = 1;
  step(*paged.stage, 1, 0, slice(ref.ids, 0, 128), first);
  const std::vector<uint32_t> a_tail = take(free, blocks_for(200) - 8);
  EXPECT_EQ(step(*paged.stage, 1, 128, slice(ref.ids, 128, 200), placement(0, false, a_tail)), want_a);

  std::vector<uint32_t> b_table = prefix;
  const std::vector<uint32_t> b_tail = take(free, blocks_for(170) - 8);
  b_table.insert(b_table.end(), b_tail.begin(), b_tail.end());
  SeqCache hit = placement(1, true, b_table);
  hit.load_snapshot = 1;
  EXPECT_EQ(step(*paged.stage, 2, 128, slice(b_ids, 128, 170), hit), want_b);

  // A released; its slot reused by C, which loads the same snapshot: still exact.
  paged.stage->drop_sequence(1);
  SeqCache again = placement(0, true, prefix);
  again.load_snapshot = 1;
  const std::vector<uint32_t> c_tail = take(free, blocks_for(200) - 8);
  again.block_ids.insert(again.block_ids.end(), c_tail.begin(), c_tail.end());
  EXPECT_EQ(step(*paged.stage, 3, 128, slice(ref.ids, 128, 200), again), want_a);
}

INSTANTIATE_TEST_SUITE_P(Types, PagedCacheKv,
                         ::testing::Values(KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8,
                                           KvType::kQ4r),
                         [](const ::testing::TestParamInfo<KvType>& i) { return std::string(kv_type_name(i.param)); });

TEST(PagedCache, SnapshotSurvivesAPlanThatOverwritesIt) {
  // Loads happen before saves: a row may load snapshot 0 while another row of the same plan
  // saves into snapshot 0.
  const ReferencePrompt ref = load_reference_prompt("rand_200");
  LoadedModel plain = load_fixture();
  LoadedModel paged = load_fixture(false, {0, 0}, kGeometry);
  const std::vector<float> want = run_prompt(*plain.stage, 1, slice(ref.ids, 0, 40), {39});
  std::vector<uint32_t> free = shuffled_blocks(5);
  const std::vector<uint32_t> prefix = take(free, 2);
  SeqCache a = placement(0, true, prefix);
  a.save_snapshot = 0;
  step(*paged.stage, 1, 0, slice(ref.ids, 0, 32), a);

  StepInput in;
  in.seqs.push_back({2, 32, slice(ref.ids, 32, 40), {7}});
  SeqCache b = placement(1, true, prefix);
  b.block_ids.push_back(take(free, 1)[0]);
  b.load_snapshot = 0;
  in.cache.push_back(b);
  in.seqs.push_back({3, 0, {5, 6, 7}, {}});
  SeqCache c = placement(2, true, take(free, 1));
  c.save_snapshot = 0;
  in.cache.push_back(c);
  StepOutput out;
  paged.stage->forward(in, &out);
  EXPECT_EQ(out.logits, want);
}

TEST(PagedCache, InvalidPlacementsAreRejectedWithoutSideEffects) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  LoadedModel plain = load_fixture();
  LoadedModel paged = load_fixture(false, {0, 0}, kGeometry);
  const std::vector<int32_t> ids = slice(ref.ids, 0, 18);
  const std::vector<float> want = run_prompt(*plain.stage, 1, ref.ids, {18});
  SeqCache a = placement(0, true, {5, 9});
  a.save_snapshot = 2;
  step(*paged.stage, 1, 0, ids, a);

  auto rejects = [&](uint64_t seq, uint32_t start, SeqCache c) {
    EXPECT_THROW(step(*paged.stage, seq, start, {ref.ids[18]}, std::move(c)), ConfigError);
  };
  rejects(1, 18, placement(1, false, {}));  // wrong slot for a running sequence
  rejects(1, 17, placement(0, false, {}));  // wrong position
  rejects(2, 0, placement(0, true, {1}));   // slot held by sequence 1
  rejects(2, 0, placement(4, true, {1}));   // slot outside the pool
  rejects(2, 0, placement(1, true, {64}));  // block outside the pool
  rejects(2, 5, placement(1, true, {1}));   // new without snapshot must start at 0
  SeqCache unsaved = placement(1, true, {5, 9});
  unsaved.load_snapshot = 0;
  rejects(2, 18, unsaved);  // snapshot never saved
  SeqCache wrong_pos = placement(1, true, {5, 9});
  wrong_pos.load_snapshot = 2;
  rejects(2, 16, wrong_pos);  // snapshot holds 18 positions
  SeqCache bad_save = placement(0, false, {});
  bad_save.save_snapshot = 3;
  rejects(1, 18, bad_save);  // snapshot outside the buffers
  StepInput self_managed;
  self_managed.seqs.push_back({1, 18, {ref.ids[18]}, {0}});
  StepOutput out;
  EXPECT_THROW(paged.stage->forward(self_managed, &out), ConfigError);  // placement missing

  // Sequence 1 continues exactly as if nothing had been tried.
  EXPECT_EQ(step(*paged.stage, 1, 18, {ref.ids[18]}, placement(0, false, {})), want);
}

TEST(PagedCache, SelfManagedStageRejectsPlacements) {
  LoadedModel plain = load_fixture();
  EXPECT_THROW(step(*plain.stage, 1, 0, {1, 2, 3}, placement(0, true, {0})), ConfigError);
}

TEST(PagedCache, MtpUsesTheSequenceTable) {
  const ReferencePrompt ref = load_reference_prompt("chat_basic");
  LoadedModel plain = load_fixture();
  LoadedModel paged = load_fixture(false, {0, 0}, kGeometry);
  const size_t n = ref.ids.size();
  std::vector<float> h_plain, h_paged;
  run_prompt(*plain.stage, 1, ref.ids, all_rows(n), 0, &h_plain);
  std::vector<uint32_t> free = shuffled_blocks(9);
  StepInput in;
  in.seqs.push_back({1, 0, ref.ids, all_rows(n)});
  in.cache.push_back(placement(3, true, take(free, blocks_for(n))));
  StepOutput out;
  paged.stage->forward(in, &out);
  ASSERT_EQ(out.final_hidden, h_plain);
  const std::vector<int32_t> next(ref.ids.begin() + 1, ref.ids.end());
  std::vector<float> want, got;
  plain.stage->forward_mtp(1, 0, next, h_plain.data(), &want);
  paged.stage->forward_mtp(1, 0, next, out.final_hidden.data(), &got);
  EXPECT_EQ(got, want);
  EXPECT_THROW(paged.stage->forward_mtp(7, 0, next, out.final_hidden.data(), &got), ConfigError);  // not placed
}

}  // namespace
}  // namespace ds::test
