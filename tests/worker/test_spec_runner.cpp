// Speculative decoding through the wire format on the real fixture model: SeqRequests with
// drafts are encoded as a StepPlan (coordinator/engine/step_codec), run by the worker's
// StageRunner on two CPU stages (n_draft / rewind on both, the MTP half on the last) and the
// StepResult decoded again. Drafts come from a plain greedy run with every third one corrupted,
// so accepted prefixes, rejections (rewind on every stage) and bonus tokens all occur; the
// emitted tokens must be the plain run's, and malformed speculative columns must be refused.
#include <gtest/gtest.h>

#include "common/error.h"
#include "coordinator/engine/step_codec.h"
#include "tests/testutil/reference.h"
#include "tests/worker/model_harness.h"
#include "worker/daemon/stage_runner.h"

namespace ds::test {
namespace {
namespace v1 = ipc::v1;

constexpr size_t kGenerate = 32;
const google::protobuf::RepeatedPtrField<v1::StageTiming> kNoTimings;

std::vector<int32_t> plain_tokens(const std::vector<int32_t>& prompt) {
  LoadedModel m = load_fixture();
  const size_t V = m.config.n_vocab;
  std::vector<int32_t> out;
  std::vector<float> logits = run_prompt(*m.stage, 1, prompt, {static_cast<uint32_t>(prompt.size() - 1)});
  for (size_t i = 0; i < kGenerate; ++i) {
    out.push_back(argmax(logits.data(), V));
    StepInput in;
    in.seqs.push_back({1, static_cast<uint32_t>(prompt.size() + i), {out.back()}, {0}});
    StepOutput o;
    m.stage->forward(in, &o);
    logits = o.logits;
  }
  return out;
}

struct Pipeline {
  LoadedModel a = load_fixture(false, {0, 4});
  LoadedModel b = load_fixture(false, {4, 8});  // the fixture has 8 layers
  StageRunner s0{std::move(a.stage), StageShape{0, a.config.n_embd, a.config.n_vocab}};
  StageRunner s1{std::move(b.stage), StageShape{1, b.config.n_embd, b.config.n_vocab}};
  uint64_t plan_id = 1;
  SentSamplingMap sent;

  StepOutcome step(const SeqRequest& r) {
    const v1::StepPlan plan = encode_plan({r}, plan_id++, 1, &sent);
    const StageOutputMessage mid = s0.run(plan, {}, kNoTimings);
    const StageOutputMessage last = s1.run(mid.env.stage_forward().plan(), mid.bulk, mid.env.stage_forward().timings());
    return decode_result(plan, last.env.step_result(), last.bulk);
  }
};

TEST(SpecRunner, OracleDraftsThroughThePlanGiveThePlainTokens) {
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  const std::vector<int32_t> want = plain_tokens(prompt);
  constexpr uint32_t K = 3;
  Pipeline p;
  SeqRequest r;
  r.seq_id = 9;
  r.tokens = prompt;
  r.logit_rows = {static_cast<uint32_t>(prompt.size() - 1)};
  r.random_u = {0.5};
  r.spec_k = K;
  r.spec_random_u.assign(K, 0.5);
  std::vector<int32_t> got;
  uint32_t corrupt = 0, drafted = 0, accepted = 0;
  while (got.size() < kGenerate) {
    const StepOutcome out = p.step(r);
    ASSERT_EQ(out.spec.size(), 1u);
    const SpecResult& v = out.spec[0];
    ASSERT_EQ(out.rows.size(), r.n_draft + 1);
    drafted += r.n_draft;
    accepted += v.accepted;
    for (uint32_t j = 0; j <= v.accepted; ++j) got.push_back(out.rows[j].token);
    EXPECT_EQ(v.drafts.size(), K);  // the MTP block's proposals (replaced by the oracle's below)
    const uint32_t next = r.start_pos + static_cast<uint32_t>(r.tokens.size()) - r.n_draft + v.accepted;
    SeqRequest n;
    n.seq_id = r.seq_id;
    n.start_pos = next;
    n.tokens = {got.back()};
    for (uint32_t j = 0; j < K && got.size() + j < want.size(); ++j) {
      const int32_t t = want[got.size() + j];
      n.tokens.push_back(++corrupt % 3 == 0 ? t + 1 : t);
    }
    n.n_draft = static_cast<uint32_t>(n.tokens.size() - 1);
    n.rewind = v.accepted < r.n_draft;
    for (uint32_t j = 0; j <= n.n_draft; ++j) {
      n.logit_rows.push_back(j);
      n.random_u.push_back(0.5);
    }
    n.spec_k = K;
    n.spec_random_u.assign(n.n_draft + K, 0.5);
    r = n;
  }
  got.resize(kGenerate);
  EXPECT_EQ(got, want);
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, drafted);
}

TEST(SpecRunner, MalformedSpeculativeColumnsAreRefused) {
  const std::vector<int32_t> prompt = load_reference_prompt("chat_basic").ids;
  Pipeline p;
  SeqRequest r;
  r.seq_id = 3;
  r.tokens = prompt;
  r.logit_rows = {static_cast<uint32_t>(prompt.size() - 1)};
  r.random_u = {0.5};
  r.spec_k = 2;
  r.spec_random_u = {0.5};  // needs 2
  EXPECT_THROW(p.step(r), StepFailed);
  r.spec_random_u = {0.5, 0.5};
  r.n_draft = 2;  // drafts need logits on each verify row
  EXPECT_THROW(p.step(r), StepFailed);
  // A plan that skips the coordinator's checks is refused by the stage.
  r.n_draft = 0;
  v1::StepPlan plan = encode_plan({r}, 99, 1, &p.sent);
  plan.set_spec_k(0, 99);
  EXPECT_THROW(p.s0.run(plan, {}, kNoTimings), FormatError);
  plan = encode_plan({r}, 100, 1, &p.sent);
  plan.mutable_rewinds()->Clear();
  EXPECT_THROW(p.s0.run(plan, {}, kNoTimings), FormatError);
}

}  // namespace
}  // namespace ds::test
